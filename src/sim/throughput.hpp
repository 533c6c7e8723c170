// Training throughput (tokens/s) as a function of the job's size in nodes:
// the cost model's `throughput 1:2000 2:3900 4:7600 8:14000` line.
#pragma once

#include <utility>
#include <vector>

namespace elasticrun::sim {

class Throughput {
 public:
  using Point = std::pair<int, double>;  // nodes, tokens/s

  Throughput() = default;
  // Points with nodes >= 1 strictly increasing and tokens/s >= 0, at least
  // one. Throws ConfigError saying which point is wrong.
  explicit Throughput(std::vector<Point> points);

  // Tokens/s at `nodes`: linear between points, from (0, 0) to the first
  // point, and past the last one along the slope of the last two (the last
  // point's tokens per node when there is one point); never negative.
  double at(int nodes) const;
  const std::vector<Point>& points() const { return points_; }

 private:
  std::vector<Point> points_;
};

}  // namespace elasticrun::sim
