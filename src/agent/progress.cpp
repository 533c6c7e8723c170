#include "agent/progress.hpp"

namespace elasticrun::agent {

void StepRate::sample(Clock::time_point now, int64_t max_step) {
  if (!anchor_time_ || anchor_step_ < 0) {
    anchor_time_ = now;
    anchor_step_ = max_step;
    return;
  }
  const auto elapsed = now - *anchor_time_;
  if (elapsed < span_) return;
  // A step that went backwards is a new round's first publication: the
  // rate starts over from there.
  if (max_step > anchor_step_) {
    rate_ = static_cast<double>(max_step - anchor_step_) /
            std::chrono::duration<double>(elapsed).count();
  }
  anchor_time_ = now;
  anchor_step_ = max_step;
}

}  // namespace elasticrun::agent
