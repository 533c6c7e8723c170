#include "util/backoff.hpp"

#include <algorithm>
#include <cmath>

namespace elasticrun::util {

ExponentialBackoff::ExponentialBackoff(std::chrono::milliseconds initial,
                                       std::chrono::milliseconds max, double factor, uint64_t seed)
    : initial_(initial), max_(max), factor_(factor), rng_(seed) {}

std::chrono::milliseconds ExponentialBackoff::next() {
  double ceiling = static_cast<double>(initial_.count()) * std::pow(factor_, attempt_);
  ceiling = std::min(ceiling, static_cast<double>(max_.count()));
  // Stop growing the exponent once capped so pow() never overflows.
  if (ceiling < static_cast<double>(max_.count())) ++attempt_;
  std::uniform_real_distribution<double> dist(ceiling / 2.0, ceiling);
  return std::chrono::milliseconds(std::llround(dist(rng_)));
}

}  // namespace elasticrun::util
