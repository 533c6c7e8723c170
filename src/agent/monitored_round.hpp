// The health monitors' part of a round's delegate, shared by the fixed
// job's rounds (fixed_agent) and the dynamic ones (round): each attempt gets
// a HealthWatch, ticked every --monitor-interval and fed the output lines
// the log rules read, and the node's GPU health; its fault goes to the
// attempt (report_fault). The workers' progress goes to the event log.
#pragma once

#include <optional>
#include <string_view>

#include "agent/attempt.hpp"
#include "agent/health_watch.hpp"
#include "agent/progress_events.hpp"

namespace elasticrun::agent {

class MonitoredRound : public AttemptDelegate {
 public:
  // `gpu`: the node's GPU health, or null. `events`: where the workers'
  // progress and sections are recorded; `metrics`: the node's, or null.
  MonitoredRound(const AgentConfig& config, const control::ControlBlock* block, GpuWatch* gpu,
                 events::EventLog& events, serve::AgentMetrics* metrics)
      : config_(config), block_(block), gpu_(gpu), events_(events), metrics_(metrics) {}

  void attempt_started(AttemptControl& control) override;
  void tick(std::chrono::steady_clock::time_point now) override;
  void on_log_line(int local_rank, std::string_view line) override;

 protected:
  // The running attempt; null before it started.
  AttemptControl* attempt() const { return attempt_; }

 private:
  const AgentConfig& config_;
  const control::ControlBlock* block_;
  GpuWatch* gpu_;
  AttemptControl* attempt_ = nullptr;
  std::optional<HealthWatch> health_;
  events::EventLog& events_;
  serve::AgentMetrics* metrics_;            // null: none served
  std::optional<ProgressEvents> progress_;  // with a control block and an event log
};

}  // namespace elasticrun::agent
