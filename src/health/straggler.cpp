#include "health/straggler.hpp"

#include <algorithm>
#include <cstdio>

namespace elasticrun::health {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::optional<StragglerVerdict> StragglerDetector::observe(const std::vector<NodeSample>& nodes) {
  if (policy_.factor <= 0) return std::nullopt;
  std::optional<StragglerVerdict> verdict;
  for (const auto& node : nodes) {
    if (node.compute_us == 0) continue;
    Track& t = tracks_[node.host];
    if (node.step <= t.step) continue;  // no new sample since the last look
    t.step = node.step;
    // The others' median: with two nodes, each is compared with the other.
    std::vector<double> others;
    for (const auto& o : nodes) {
      if (o.host != node.host && o.compute_us > 0) others.push_back(o.compute_us);
    }
    if (others.empty()) continue;
    const double reference = median(others);
    if (static_cast<double>(node.compute_us) <= policy_.factor * reference) {
      t.over = 0;
      continue;
    }
    ++t.over;
    if (t.over >= policy_.points && !verdict) {
      char text[256];
      std::snprintf(text, sizeof text,
                    "compute time %.1f ms, above %.2f x the other nodes' median %.1f ms for %d "
                    "samples in a row",
                    node.compute_us / 1000.0, policy_.factor, reference / 1000.0, t.over);
      verdict = StragglerVerdict{node.host, text};
      t.over = 0;
    }
  }
  return verdict;
}

}  // namespace elasticrun::health
