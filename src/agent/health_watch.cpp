#include "agent/health_watch.hpp"

#include <algorithm>

namespace elasticrun::agent {

bool rules_read_output(const AgentConfig& config, int lr) {
  return (lr == 0 ? config.rank0_rules : config.every_rank_rules) != nullptr;
}

HealthWatch::HealthWatch(const AgentConfig& config, const control::ControlBlock* block,
                         int local_ranks, health::Clock::time_point start, GpuWatch* gpu)
    : block_(block),
      gpu_(gpu),
      progress_(config.progress, local_ranks, start),
      samples_(static_cast<size_t>(local_ranks)),
      rules_(static_cast<size_t>(local_ranks)),
      carried_(static_cast<size_t>(local_ranks), -1) {
  if (block_) {
    for (int lr = 0; lr < std::min(block_->num_slots(), local_ranks); ++lr) {
      carried_[static_cast<size_t>(lr)] = block_->read_slot(lr).step;
    }
  }
  for (int lr = 0; lr < local_ranks; ++lr) {
    const auto& compiled = lr == 0 ? config.rank0_rules : config.every_rank_rules;
    if (compiled) rules_[static_cast<size_t>(lr)].emplace(compiled, start);
  }
  if (gpu_) gpu_->begin_attempt(start);
}

bool HealthWatch::watches_output(int lr) const {
  return lr >= 0 && static_cast<size_t>(lr) < rules_.size() && rules_[static_cast<size_t>(lr)];
}

std::optional<health::Fault> HealthWatch::on_line(health::Clock::time_point now, int lr,
                                                  std::string_view line) {
  if (!watches_output(lr)) return std::nullopt;
  auto fault = rules_[static_cast<size_t>(lr)]->on_line(now, line);
  if (fault) fault->local_rank = lr;
  return fault;
}

std::optional<health::Fault> HealthWatch::tick(health::Clock::time_point now,
                                               const supervisor::WorkerGroup& workers) {
  // The GPUs' snapshots are judged on every tick, so that their notes are
  // logged as they come in.
  std::optional<health::Fault> gpu_fault;
  if (gpu_) gpu_fault = gpu_->poll();
  auto fault = check_workers(now, workers);
  // A GPU's error explains what the workers show on the same tick (a hang,
  // an error line), not the reverse.
  return gpu_fault ? gpu_fault : fault;
}

std::optional<health::Fault> HealthWatch::check_workers(health::Clock::time_point now,
                                                        const supervisor::WorkerGroup& workers) {
  for (size_t lr = 0; lr < rules_.size(); ++lr) {
    if (!rules_[lr]) continue;
    if (auto fault = rules_[lr]->check(now)) {
      fault->local_rank = static_cast<int>(lr);
      return fault;
    }
  }
  if (!block_) return std::nullopt;
  const int n = std::min(block_->num_slots(), static_cast<int>(samples_.size()));
  for (int lr = 0; lr < n; ++lr) {
    const auto slot = block_->read_slot(lr);
    health::RankSample& s = samples_[static_cast<size_t>(lr)];
    s.running = static_cast<size_t>(lr) < workers.size() && !workers.exited(lr);
    s.attached = (slot.flags & control::kFlagAttached) != 0;
    // A step from before this attempt is not progress in it.
    s.step = slot.step > carried_[static_cast<size_t>(lr)] ? slot.step : -1;
    s.loss_non_finite = (slot.flags & control::kFlagLossNonFinite) != 0;
    s.loss = slot.loss;
    s.in_section = (slot.flags & control::kFlagInSection) != 0;
    s.section_limit = std::chrono::seconds(slot.section_limit_s);
    s.section = slot.section;
  }
  return progress_.observe(now, samples_);
}

}  // namespace elasticrun::agent
