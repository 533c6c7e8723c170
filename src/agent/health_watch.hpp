// The health monitors of one attempt on this node (docs/health.md), on the
// attempt's loop: every --monitor-interval its delegate hands it a look at
// the control block's slots and the worker group, and it answers with the
// first fault, which the delegate reports to the attempt. GPU health (the
// node's GpuWatch, which outlives attempts) is judged on the same tick.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "agent/agent.hpp"
#include "control/control_block.hpp"
#include "health/fault.hpp"
#include "health/log_rules.hpp"
#include "health/progress_monitor.hpp"
#include "supervisor/worker_group.hpp"

namespace elasticrun::agent {

class HealthWatch {
 public:
  // `block` may be null (no control block: no progress to watch). Local
  // rank 0's output is judged by `rank0_rules`, every other rank's by
  // `every_rank_rules` (either may be null: no rules).
  // `gpu` may be null (no GPU health on this node).
  HealthWatch(const AgentConfig& config, const control::ControlBlock* block, int local_ranks,
              health::Clock::time_point start, GpuWatch* gpu = nullptr);

  // Whether a log rule reads local rank `lr`'s output (its streams must
  // then pass through the agent).
  bool watches_output(int lr) const;

  std::optional<health::Fault> tick(health::Clock::time_point now,
                                    const supervisor::WorkerGroup& workers);
  // A line of local rank `lr`'s stdout or stderr.
  std::optional<health::Fault> on_line(health::Clock::time_point now, int lr,
                                       std::string_view line);

 private:
  // The log rules' and the progress monitors' fault, if any.
  std::optional<health::Fault> check_workers(health::Clock::time_point now,
                                             const supervisor::WorkerGroup& workers);

  const control::ControlBlock* block_;
  GpuWatch* gpu_;
  health::ProgressMonitor progress_;
  std::vector<health::RankSample> samples_;             // reused: one look per tick
  std::vector<std::optional<health::LogRules>> rules_;  // per local rank
  // The step each slot held when the attempt started (-1: none). A worker
  // that goes on from the last round (--inprocess-restart) re-forms its
  // process group and waits for the round's new workers before it steps
  // again: until then it is starting (the start-up limit), not hung.
  std::vector<int64_t> carried_;
};

// Whether a log rule of `config` reads local rank `lr`'s output.
bool rules_read_output(const AgentConfig& config, int lr);

}  // namespace elasticrun::agent
