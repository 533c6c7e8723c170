// What the agent learns of its workers' progress from the control block.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace elasticrun::agent {

// The step rate of a node's workers, from the highest step any of them has
// published, measured over spans of at least `span` so that a sample taken
// every monitor interval (0.1 s) does not turn one step into a rate.
class StepRate {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StepRate(std::chrono::milliseconds span = std::chrono::seconds(1)) : span_(span) {}

  void sample(Clock::time_point now, int64_t max_step);
  // Steps per second over the last complete span; 0 before there is one, or
  // while the workers publish no steps.
  double per_second() const { return rate_; }

 private:
  std::chrono::milliseconds span_;
  std::optional<Clock::time_point> anchor_time_;
  int64_t anchor_step_ = -1;
  double rate_ = 0;
};

}  // namespace elasticrun::agent
