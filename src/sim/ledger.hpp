// The accounting of one simulated run (docs/simulator.md): where its time
// went (training kept, lost or checkpointing, and down, at each size), the
// tokens it processed against the ideal, the node-hours beyond its static
// allocation and those it absorbed, the node-hours billed by pool and their
// cost, the scale events between its running rounds, and the run over time
// (series).
#pragma once

#include <optional>
#include <utility>

#include "sim/duration.hpp"
#include "sim/result.hpp"
#include "sim/series.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim {

// Writes those figures of a RunResult as the run goes; the rest of it (the
// policy, the sizes, the other counts of events, the run's length) is the
// caller's. Time is accounted in stretches: each runs from since() to the
// time it ends, when the next one begins.
class Ledger {
 public:
  // Writes into `r` (useful, lost_work, checkpointing, down, time_at_size,
  // tokens, ideal_tokens, the node-hours, cost, the scale and thrash events,
  // series), which must outlive it; reads its static_size.
  Ledger(const Trace& trace, RunResult& r) : trace_(trace), r_(r), series_(r.series) {}

  // Integrates what depends on capacity alone over `dt` in which `capacity`
  // nodes were available and `noticed` spot nodes noticed had not gone yet
  // (billed, out of the capacity).
  void elapse(Millis dt, int capacity, int noticed);

  // When the stretch being accounted began.
  Millis since() const { return since_; }

  // Ends a stretch of training at `size` from since() to `now`. With
  // periodic checkpoints the stretch is cycles of checkpoint_every training
  // then checkpoint_save saving, starting from the checkpoint just loaded;
  // `saved`: everything trained counts, else only what the last completed
  // checkpoint holds.
  void account_running(Millis now, int size, bool saved);

  // Ends a stretch of not training (saving for a scale event, restarting,
  // loading, waiting for nodes) from since() to `now`.
  void account_down(Millis now);

  // A round of `size` starts running at `now`, the stretch of training
  // after the points recorded so far: a scale event when the size of the
  // last running round differs, a thrash event when that reverses the
  // previous scale event within the policy's min_stable_period.
  void running_from(Millis now, int size);

  // When the job will have done the trace's work if it trains on at `size`
  // from since() (it is running, `now`); nullopt without work, or past the
  // end.
  std::optional<Millis> work_done_at(Millis now, int size) const;

  // Records the state after everything that happened at `at`, `present`
  // nodes there and `world` training (0 when not), with the progress
  // accounted; SeriesRecorder::mark's contract.
  void mark(Millis at, int present, int world, bool always);

  // After the last stretch is accounted: the time down and the cost.
  void close();

 private:
  const Trace& trace_;
  RunResult& r_;
  SeriesRecorder series_;
  Millis since_{0};
  std::optional<int> last_running_size_;
  std::optional<std::pair<Millis, int>> last_scale_;  // time, direction
};

}  // namespace elasticrun::sim
