#include "sim/throughput.hpp"

#include <algorithm>
#include <string>

#include "elasticrun/errors.hpp"

namespace elasticrun::sim {

Throughput::Throughput(std::vector<Point> points) : points_(std::move(points)) {
  if (points_.empty()) throw ConfigError("throughput needs at least one NODES:TOKENS_PER_S point");
  for (size_t i = 0; i < points_.size(); ++i) {
    const auto [nodes, tokens] = points_[i];
    const std::string at = "throughput point " + std::to_string(nodes) + ":";
    if (nodes < 1) throw ConfigError(at + " nodes must be at least 1");
    if (!(tokens >= 0)) throw ConfigError(at + " tokens/s must not be negative");
    if (i > 0 && nodes <= points_[i - 1].first) {
      throw ConfigError(at + " nodes must increase from one point to the next");
    }
  }
}

double Throughput::at(int nodes) const {
  if (nodes <= 0 || points_.empty()) return 0;
  auto line = [nodes](Point a, Point b) {
    const double slope = (b.second - a.second) / (b.first - a.first);
    return std::max(0.0, a.second + slope * (nodes - a.first));
  };
  if (nodes <= points_.front().first) return line({0, 0.0}, points_.front());
  auto above = std::lower_bound(points_.begin(), points_.end(), nodes,
                                [](const Point& p, int n) { return p.first < n; });
  if (above != points_.end()) {
    if (above->first == nodes) return above->second;
    return line(*(above - 1), *above);
  }
  if (points_.size() == 1) return line({0, 0.0}, points_.back());
  return line(points_[points_.size() - 2], points_.back());
}

}  // namespace elasticrun::sim
