// Exponential backoff with full jitter, for retries of connects and joins.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace elasticrun::util {

class ExponentialBackoff {
 public:
  // The n-th delay is drawn uniformly from [initial*factor^n / 2, initial*factor^n],
  // capped at max. Half-jitter keeps a floor so that a thundering herd of agents
  // restarting together still spreads out without retrying in a tight loop.
  ExponentialBackoff(std::chrono::milliseconds initial, std::chrono::milliseconds max,
                     double factor = 2.0, uint64_t seed = std::random_device{}());

  std::chrono::milliseconds next();
  void reset() { attempt_ = 0; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  double factor_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace elasticrun::util
