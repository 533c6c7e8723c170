#include "sim/result.hpp"

namespace elasticrun::sim {

double RunResult::goodput() const {
  return duration.count() > 0 ? static_cast<double>(useful.count()) / duration.count() : 0;
}

double RunResult::token_efficiency() const {
  return ideal_tokens > 0 ? tokens / ideal_tokens : 1;
}

std::optional<double> RunResult::absorbed_idle_fraction() const {
  if (idle_node_hours <= 0) return std::nullopt;
  return absorbed_node_hours / idle_node_hours;
}

std::optional<double> RunResult::cost_per_unit() const {
  if (!cost || tokens <= 0) return std::nullopt;
  return *cost / tokens;
}

}  // namespace elasticrun::sim
