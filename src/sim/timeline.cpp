#include "sim/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <random>

namespace elasticrun::sim {
namespace {

class Draws {
 public:
  explicit Draws(uint64_t seed) : rng_(seed) {}

  // Uniform in [0, 1) from the top 53 bits: the same sequence everywhere.
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1p-53; }

  // The time to the next event of a process with `rate` per node-hour over
  // `nodes` nodes; nullopt when it never comes.
  std::optional<Millis> wait(const std::optional<Generator>& g, int nodes) {
    if (!g || g->rate_per_node_hour <= 0 || nodes <= 0) return std::nullopt;
    const double hours = -std::log1p(-uniform()) / (g->rate_per_node_hour * nodes);
    const double ms = hours * 3600e3;
    if (ms > 1e15) return std::nullopt;
    return Millis(static_cast<int64_t>(std::ceil(ms)));
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

int capacity_after(const TimelineEvent& e, int capacity, const Trace& trace) {
  switch (e.kind) {
    case EventKind::kCapacity:
      return e.count;
    case EventKind::kPreempt:
    case EventKind::kFail:
      return std::max(0, capacity - e.count);
    case EventKind::kSpotNotice:
      return capacity - std::min(e.count, trace.fleet.spot(capacity));
    case EventKind::kReplace:
      return std::min(trace.nodes_max, capacity + e.count);
    case EventKind::kScale:
      return capacity;
  }
  return capacity;
}

std::vector<TimelineEvent> expand(const Trace& trace, uint64_t seed) {
  std::vector<TimelineEvent> out;
  Draws draws(seed);
  int capacity = trace.initial_capacity;
  std::optional<Millis> next_failure = draws.wait(trace.failures, capacity);
  std::optional<Millis> next_notice = draws.wait(trace.notices, trace.fleet.spot(capacity));
  // Nodes coming back (repairs, replacements), earliest first.
  std::priority_queue<Millis, std::vector<Millis>, std::greater<>> returns;
  size_t next_explicit = 0;

  while (true) {
    enum { kNothing, kExplicit, kReturn, kFailure, kNotice } source = kNothing;
    Millis at = trace.duration;
    auto consider = [&](std::optional<Millis> t, decltype(source) s) {
      if (t && *t < at) at = *t, source = s;
    };
    if (next_explicit < trace.events.size()) consider(trace.events[next_explicit].at, kExplicit);
    if (!returns.empty()) consider(returns.top(), kReturn);
    consider(next_failure, kFailure);
    consider(next_notice, kNotice);
    if (source == kNothing) break;

    TimelineEvent e;
    e.at = at;
    switch (source) {
      case kExplicit: {
        const TraceEvent& t = trace.events[next_explicit++];
        e.kind = t.kind;
        e.count = t.count;
        e.line = t.line;
        break;
      }
      case kReturn:
        returns.pop();
        e.kind = EventKind::kReplace;
        e.count = 1;
        break;
      case kFailure:
      case kNotice: {
        const bool failure = source == kFailure;
        e.kind = failure ? EventKind::kFail : EventKind::kSpotNotice;
        e.count = 1;
        e.pick = draws.uniform();
        returns.push(at + (failure ? trace.failures->delay : trace.notices->delay));
        break;
      }
      case kNothing:
        break;
    }
    const int before = capacity;
    capacity = capacity_after(e, capacity, trace);
    out.push_back(e);
    // A generator's own event always redraws it (its previous draw is used);
    // others redraw only when the rate changed.
    auto from_now = [at](std::optional<Millis> d) -> std::optional<Millis> {
      if (!d) return std::nullopt;
      return at + *d;
    };
    if (source == kFailure || capacity != before) {
      next_failure = from_now(draws.wait(trace.failures, capacity));
    }
    if (source == kNotice || capacity != before) {
      next_notice = from_now(draws.wait(trace.notices, trace.fleet.spot(capacity)));
    }
  }
  return out;
}

}  // namespace elasticrun::sim
