#include "agent/monitored_round.hpp"

namespace elasticrun::agent {

void MonitoredRound::attempt_started(AttemptControl& control) {
  attempt_ = &control;
  health_.emplace(config_, block_, config_.nproc_per_node, std::chrono::steady_clock::now(), gpu_);
  if (block_ && events_.enabled()) {
    progress_.emplace(*block_, events_, metrics_, control.restart_count(), control.rank_offset());
  }
}

void MonitoredRound::tick(std::chrono::steady_clock::time_point now) {
  if (progress_) progress_->tick(now);
  if (!health_ || !attempt_) return;
  if (auto fault = health_->tick(now, attempt_->workers())) attempt_->report_fault(*fault);
}

void MonitoredRound::on_log_line(int local_rank, std::string_view line) {
  if (!health_ || !attempt_) return;
  if (auto fault = health_->on_line(std::chrono::steady_clock::now(), local_rank, line)) {
    attempt_->report_fault(*fault);
  }
}

}  // namespace elasticrun::agent
