#include "agent/health_watch.hpp"

namespace elasticrun::agent {

HealthWatch::HealthWatch(const health::ProgressConfig& progress, const control::ControlBlock* block,
                         int local_ranks, health::Clock::time_point start)
    : block_(block),
      progress_(progress, local_ranks, start),
      samples_(static_cast<size_t>(local_ranks)) {}

std::optional<health::Fault> HealthWatch::tick(health::Clock::time_point now,
                                               const supervisor::WorkerGroup& workers) {
  if (!block_) return std::nullopt;
  const int n = std::min(block_->num_slots(), static_cast<int>(samples_.size()));
  for (int lr = 0; lr < n; ++lr) {
    const auto slot = block_->read_slot(lr);
    health::RankSample& s = samples_[static_cast<size_t>(lr)];
    s.running = static_cast<size_t>(lr) < workers.size() && !workers.exited(lr);
    s.attached = (slot.flags & control::kFlagAttached) != 0;
    s.step = slot.step;
    s.loss_non_finite = (slot.flags & control::kFlagLossNonFinite) != 0;
    s.loss = slot.loss;
    s.in_section = (slot.flags & control::kFlagInSection) != 0;
    s.section_limit = std::chrono::seconds(slot.section_limit_s);
    s.section = slot.section;
  }
  return progress_.observe(now, samples_);
}

}  // namespace elasticrun::agent
