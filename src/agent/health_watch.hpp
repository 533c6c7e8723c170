// The health monitors of one attempt on this node (docs/health.md), on the
// attempt's loop: every --monitor-interval its delegate hands it a look at
// the control block's slots and the worker group, and it answers with the
// first fault, which the delegate reports to the attempt.
#pragma once

#include <optional>
#include <vector>

#include "control/control_block.hpp"
#include "health/fault.hpp"
#include "health/progress_monitor.hpp"
#include "supervisor/worker_group.hpp"

namespace elasticrun::agent {

class HealthWatch {
 public:
  // `block` may be null (no control block: nothing to watch but exits).
  HealthWatch(const health::ProgressConfig& progress, const control::ControlBlock* block,
              int local_ranks, health::Clock::time_point start);

  std::optional<health::Fault> tick(health::Clock::time_point now,
                                    const supervisor::WorkerGroup& workers);

 private:
  const control::ControlBlock* block_;
  health::ProgressMonitor progress_;
  std::vector<health::RankSample> samples_;  // reused: one look per tick
};

}  // namespace elasticrun::agent
