// The event log's view of the workers' progress (docs/events.md): every
// events::type::kProgressInterval a kProgress line with each local rank's
// step, and a kSection line when a rank's marked section (a checkpoint
// save, an evaluation) ends, with how long it was open. Sampled on the
// attempt's health tick, so a section's length is exact to one
// --monitor-interval; reads the control block only. With metrics, each
// tick also sets the workers' steps, local rank 0's step time and the
// summed samples per second there.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "control/control_block.hpp"
#include "events/event_log.hpp"
#include "serve/metrics.hpp"

namespace elasticrun::agent {

class ProgressEvents {
 public:
  using Clock = std::chrono::steady_clock;

  // `metrics`: null when the agent serves none.
  ProgressEvents(const control::ControlBlock& block, events::EventLog& events,
                 serve::AgentMetrics* metrics, int restart_count, int rank_offset);

  void tick(Clock::time_point now);

 private:
  struct OpenSection {
    std::string name;
    Clock::time_point since;
  };

  const control::ControlBlock& block_;
  events::EventLog& events_;
  serve::AgentMetrics* metrics_;
  int restart_count_;
  int rank_offset_;
  std::optional<Clock::time_point> last_sample_;
  int64_t last_max_step_ = -1;
  std::vector<std::optional<OpenSection>> sections_;  // per local rank
  // Local rank 0's step and when the tick first saw it (step times).
  int64_t rank0_step_ = -1;
  std::optional<Clock::time_point> rank0_since_;
};

}  // namespace elasticrun::agent
