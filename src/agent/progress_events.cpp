#include "agent/progress_events.hpp"

#include <cmath>

#include "events/types.hpp"

namespace elasticrun::agent {

ProgressEvents::ProgressEvents(const control::ControlBlock& block, events::EventLog& events,
                               serve::AgentMetrics* metrics, int restart_count, int rank_offset)
    : block_(block),
      events_(events),
      metrics_(metrics),
      restart_count_(restart_count),
      rank_offset_(rank_offset),
      sections_(static_cast<size_t>(block.num_slots())) {}

void ProgressEvents::tick(Clock::time_point now) {
  const int n = block_.num_slots();
  std::vector<control::ControlBlock::SlotView> slots;
  slots.reserve(static_cast<size_t>(n));
  for (int lr = 0; lr < n; ++lr) slots.push_back(block_.read_slot(lr));

  for (int lr = 0; lr < n; ++lr) {
    const auto& s = slots[static_cast<size_t>(lr)];
    auto& open = sections_[static_cast<size_t>(lr)];
    const bool in = (s.flags & control::kFlagInSection) != 0;
    if (open && (!in || s.section != open->name)) {
      events_.record(events::type::kSection,
                     {{"restart_count", restart_count_},
                      {"local_rank", lr},
                      {"rank", rank_offset_ + lr},
                      {"name", open->name},
                      {"seconds", std::chrono::duration<double>(now - open->since).count()}});
      open.reset();
    }
    if (in && !open) open = OpenSection{s.section, now};
  }

  int64_t max_step = -1;
  double tokens = 0;
  bool any_tokens = false;
  std::vector<int64_t> step_list;
  for (const auto& s : slots) {
    step_list.push_back(s.step);
    max_step = std::max(max_step, s.step);
    if (std::isfinite(s.tokens_per_s)) {
      tokens += s.tokens_per_s;
      any_tokens = true;
    }
  }
  if (metrics_) {
    double step_s = NAN;
    const int64_t s0 = step_list.empty() ? -1 : step_list[0];
    if (s0 > rank0_step_) {
      if (rank0_since_ && rank0_step_ >= 0) {
        step_s = std::chrono::duration<double>(now - *rank0_since_).count() /
                 static_cast<double>(s0 - rank0_step_);
      }
      rank0_step_ = s0;
      rank0_since_ = now;
    }
    metrics_->observe_steps(step_list, step_s, any_tokens ? tokens : NAN);
  }

  if (last_sample_ && now - *last_sample_ < events::type::kProgressInterval) return;
  nlohmann::json steps = step_list;
  if (max_step < 0) return;  // nothing to say before the first step
  nlohmann::json fields = {
      {"restart_count", restart_count_}, {"rank_offset", rank_offset_}, {"steps", steps}};
  if (last_sample_ && last_max_step_ >= 0) {
    const double dt = std::chrono::duration<double>(now - *last_sample_).count();
    if (dt > 0) fields["steps_per_s"] = static_cast<double>(max_step - last_max_step_) / dt;
  }
  if (any_tokens) fields["tokens_per_s"] = tokens;
  const double loss = slots.empty() ? NAN : slots[0].loss;
  if (std::isfinite(loss)) fields["loss"] = loss;
  events_.record(events::type::kProgress, std::move(fields));
  last_sample_ = now;
  last_max_step_ = max_step;
}

}  // namespace elasticrun::agent
