// The simulator's outputs: a table for people, JSON for scripts and plots.
// Neither holds anything that varies between two runs of the same trace and
// seed (no timings, no dates), so equal inputs give byte-equal outputs.
#pragma once

#include <string>
#include <vector>

#include "sim/simulator.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim {

// A heading (trace, duration, nodes, static allocation, idle GPU-hours
// beyond it; the work and the prices per node-hour when the trace has them)
// and one row per run: goodput, the trace's unit processed against the
// ideal, absorbed idle fraction, scale and thrash events, restarts, work
// lost, downtime, preemptions answered in one decision; with `work` the
// time to train; with prices the cost and the cost per million units; time
// at each size.
std::string format_table(const Trace& trace, uint64_t seed, const std::vector<RunResult>& runs);

// {"trace", "seed", "duration_s", "nodes_max", "gpus_per_node",
//  "static_size", "idle_gpu_hours_beyond_static", "unit", "work" (null
//  without), "throughput" ({"NODES": per second, ...}, the trace's points),
//  "checkpoint_every_s" (null without), "checkpoint_save_s", "prices"
//  ({"on_demand", "spot", "on_demand_nodes", "spot_nodes"}, null without),
//  "policies": {NAME: {"goodput", "token_efficiency", "time_to_train_s",
//  "cost", "cost_per_unit" (null when not known), "run_s", "recovery"
//  ({"restart_s", "checkpoint_load_s", "stop_save_s"}: Trace::recovery),
//  "absorbed_idle_fraction" (null when nothing was idle), "scale_events",
//  "thrash_events", "time_at_each_size": {"NODES": seconds, ...}, "series":
//  {"t_s", "capacity", "world", "useful_s", "tokens": one array each, one
//  entry per SeriesPoint}, ...}}}, indented.
std::string format_json(const Trace& trace, uint64_t seed, const std::vector<RunResult>& runs);

}  // namespace elasticrun::sim
