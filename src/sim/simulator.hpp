// The discrete-event simulation of one job under one policy: the nodes
// available over time (a timeline), the policy's decisions at every change
// and at the times it asks to be asked again, and the cost model turning
// them into downtime and lost work. docs/simulator.md defines every figure.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/timeline.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim {

// The job's state from `at` until the next point: one point per change of
// the capacity or of the world size, not one per second.
struct SeriesPoint {
  Millis at{0};
  int capacity = 0;  // nodes available to the job
  int world = 0;     // nodes training; 0 while saving, restarting, loading or waiting
  // Training done by `at` whose results survive (work a later crash undoes
  // is not counted), and the tokens it processed. Between two points both
  // grow about linearly while the world size is above 0 (periodic saves
  // stall them briefly) and stay flat otherwise: after a crash a point at
  // the last completed checkpoint keeps that true.
  Millis useful{0};
  double tokens = 0;
};

struct RunResult {
  std::string policy;
  Millis duration{0};
  int static_size = 0;  // the job's size at time 0, its static allocation
  int gpus_per_node = 1;

  // Wall time split: useful + lost_work + checkpointing = time training
  // (sum of time_at_size over sizes > 0); down = time_at_size[0].
  Millis useful{0};         // training whose results survive
  Millis lost_work{0};      // training undone: work since the last checkpoint at a crash
  Millis checkpointing{0};  // periodic checkpoint saves stalling training
  Millis down{0};           // saving for a scale event, restarting, loading, waiting for nodes
  std::map<int, Millis> time_at_size;  // in nodes; 0 is "not training"

  double tokens = 0;        // processed in useful training
  double ideal_tokens = 0;  // at the largest allowed size the capacity permits, with no cost
  // Node-hours available beyond the static allocation (capacity up to the
  // policy's max, minus static_size), and those the job ran on.
  double idle_node_hours = 0;
  double absorbed_node_hours = 0;

  int scale_events = 0;  // the size of consecutive running rounds differs
  int scale_ups = 0;
  int scale_downs = 0;
  int thrash_events = 0;  // a scale event reversing the previous one within min_stable
  int restarts = 0;       // rounds ended, whatever the reason
  int members_lost = 0;   // job nodes that failed (not idle ones)
  int decisions = 0;      // calls of decide()
  int preempt_requests = 0;
  // Preemptions whose first decision freed the nodes (with idle ones)
  // without a running member being taken by force.
  int preempt_answered_in_one_decision = 0;

  // From time 0 to the end of the trace, in time order; the last point is
  // at `duration` and holds the totals.
  std::vector<SeriesPoint> series;

  double goodput() const;           // useful / duration
  double token_efficiency() const;  // tokens / ideal_tokens (1 when ideal is 0)
  // absorbed / idle node-hours; nullopt when nothing was idle beyond the
  // static allocation.
  std::optional<double> absorbed_idle_fraction() const;
};

// Runs `policy` (controller_names()) over `timeline` (expand(trace, seed)).
// Throws ConfigError for an unknown policy.
RunResult simulate(const Trace& trace, const std::vector<TimelineEvent>& timeline,
                   std::string_view policy);

// Expands the trace once with `seed` and runs each policy over the same
// timeline, in the order given.
std::vector<RunResult> compare(const Trace& trace, uint64_t seed,
                               const std::vector<std::string>& policies);

}  // namespace elasticrun::sim
