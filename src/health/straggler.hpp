// The straggler monitor, run by the round's leader: a node whose workers'
// compute time (what the SDK's compute() timed, published in the node's
// heartbeat) stays above `factor` times the median of the other nodes' for
// `points` new samples in a row is a straggler. In a data-parallel job every
// rank waits for the slowest at each all-reduce, so step times are equal
// everywhere; only the time a rank spends on its own work tells which node
// holds the others up. Pure logic: the leader passes what it read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::health {

struct StragglerPolicy {
  double factor = 0;  // 0: the monitor is off
  int points = 10;
};

// One node's latest sample, from its heartbeat.
struct NodeSample {
  std::string host;
  int64_t step = -1;        // the step the sample is of; a new step is a new point
  uint32_t compute_us = 0;  // 0: no compute time published
};

struct StragglerVerdict {
  std::string host;
  std::string message;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerPolicy policy) : policy_(policy) {}

  // One look at every member. Returns the first node past its points, once.
  std::optional<StragglerVerdict> observe(const std::vector<NodeSample>& nodes);

 private:
  struct Track {
    int64_t step = -1;
    int over = 0;  // consecutive new samples above the limit
  };
  StragglerPolicy policy_;
  std::map<std::string, Track> tracks_;
};

}  // namespace elasticrun::health
