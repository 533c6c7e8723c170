// A point in time after which a blocking call gives up.
#pragma once

#include <algorithm>
#include <chrono>

namespace elasticrun::util {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  bool is_never() const { return at_ == Clock::time_point::max(); }

  // Milliseconds left, clamped to [0, INT_MAX] so it can go straight to poll().
  int poll_timeout_ms() const {
    if (is_never()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 0x7fffffff));
  }

  std::chrono::milliseconds remaining() const {
    if (is_never()) return std::chrono::milliseconds::max();
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()));
  }

  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace elasticrun::util
