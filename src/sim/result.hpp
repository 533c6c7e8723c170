// What one simulated run of one policy gives: where its time went, its
// tokens, the node-hours it absorbed and those billed, its scale events,
// and the run over time. docs/simulator.md defines every figure.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/duration.hpp"
#include "sim/series.hpp"

namespace elasticrun::sim {

struct RunResult {
  std::string policy;
  // The run's length: the trace's duration, or the time to train when the
  // trace's work was done before its end.
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

  // Node-hours billed by pool (trace.fleet): every available node, idle
  // ones and spares included, and a noticed spot node until it goes; and
  // their cost at the trace's prices, nullopt without a price line.
  double spot_node_hours = 0;
  double on_demand_node_hours = 0;
  std::optional<double> cost;
  // With the trace's `work`: when the job had done it (the run ends then);
  // nullopt when it had not by the end of the trace, or without `work`.
  std::optional<Millis> time_to_train;

  // From time 0 to the end of the run, in time order; the last point is
  // at `duration` and holds the totals.
  std::vector<SeriesPoint> series;

  double goodput() const;           // useful / duration
  double token_efficiency() const;  // tokens / ideal_tokens (1 when ideal is 0)
  // absorbed / idle node-hours; nullopt when nothing was idle beyond the
  // static allocation.
  std::optional<double> absorbed_idle_fraction() const;
  // cost / tokens (in the trace's unit); nullopt without a price line or
  // without useful work.
  std::optional<double> cost_per_unit() const;
};

}  // namespace elasticrun::sim
