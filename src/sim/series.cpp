#include "sim/series.hpp"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace elasticrun::sim {
namespace {

double seconds(Millis d) {
  return static_cast<double>(d.count()) / 1e3;
}

}  // namespace

void SeriesRecorder::mark(const SeriesPoint& p, bool always) {
  std::vector<SeriesPoint>& s = points_;
  auto same_state = [&](const SeriesPoint& q) {
    return q.capacity == p.capacity && q.world == p.world;
  };
  if (!s.empty() && s.back().at == p.at) {
    s.back() = p;
    if (s.size() >= 2 && same_state(s[s.size() - 2]) && !always) {
      s.pop_back();
      stretch_start_ = std::min(stretch_start_, s.size());
    }
  } else if (always || s.empty() || !same_state(s.back())) {
    s.push_back(p);
  }
}

void SeriesRecorder::stretch_ended(const Trace& trace, Millis since, const Stretch& s, Millis kept,
                                   double rate, int world, Millis useful, double tokens) {
  for (size_t i = stretch_start_; i < points_.size(); ++i) {
    SeriesPoint& p = points_[i];
    const Millis survived = std::min(stretch(trace, p.at - since).trained, kept);
    p.useful = useful + survived;
    p.tokens = tokens + seconds(survived) * rate;
  }
  if (kept < s.trained && s.durable_at > Millis(0)) {
    const Millis at = since + s.durable_at;
    auto after = std::upper_bound(points_.begin(), points_.end(), at,
                                  [](Millis t, const SeriesPoint& p) { return t < p.at; });
    assert(after != points_.begin());
    if (std::prev(after)->at < at) {
      points_.insert(after, {at, std::prev(after)->capacity, world, useful + kept,
                             tokens + seconds(kept) * rate});
    }
  }
  stretch_start_ = points_.size();
}

}  // namespace elasticrun::sim
