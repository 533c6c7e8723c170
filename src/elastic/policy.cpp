// The elastic policy. The rules, in the order decide() applies them, are in
// docs/policy.md; the reasons for each are next to the code.
#include "elastic/policy.hpp"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>

#include "elasticrun/errors.hpp"
#include "util/state_line.hpp"
#include "util/strings.hpp"

namespace elasticrun::elastic {
namespace {

std::string str(int n) {
  return std::to_string(n);
}

// "30s" or "1500ms": reasons are read by people.
std::string str(Millis d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
  return std::to_string(d.count()) + "ms";
}

std::string plural(int n, const char* one, const char* many) {
  return str(n) + " " + (n == 1 ? one : many);
}

// Doubling min_stable_period `level` times, saturating at max_stable_period
// (and never overflowing, whatever level a persisted state carries).
Millis period_at(const PolicyConfig& c, int level) {
  Millis p = c.min_stable_period;
  for (int i = 0; i < level && p < c.max_stable_period && p.count() > 0; ++i) {
    p = p > c.max_stable_period / 2 ? c.max_stable_period : p * 2;
  }
  return std::min(p, c.max_stable_period);
}

// The first level whose period is max_stable_period; backoff stops there.
int top_level(const PolicyConfig& c) {
  int level = 0;
  while (period_at(c, level) < c.max_stable_period && c.min_stable_period.count() > 0) ++level;
  return level;
}

// The operator's cap as it applies under this config (a state written by a
// leader with another config may hold a cap outside [min, max]).
int size_limit(const PolicyConfig& c, const PolicyState& s) {
  return std::clamp(s.cap.value_or(c.max_replicas), c.min_replicas, c.max_replicas);
}

// The largest allowed size <= n, or the smallest allowed when none is: the
// next round cannot close at a size that is not allowed, so when too few
// agents remain it waits for joins at the smallest.
int floor_or_smallest(const PolicyConfig& c, int n) {
  return largest_allowed_at_most(c, n).value_or(smallest_allowed(c));
}

Decision make(Action a, int target, std::string reason) {
  Decision d;
  d.action = a;
  d.target = target;
  d.reason = std::move(reason);
  return d;
}

[[noreturn]] void bad_state(const std::string& text, const std::string& why) {
  throw ConfigError("policy state " + util::quote(text) + ": " + why);
}

int64_t parse_number(const std::string& text, std::string_view v, bool allow_negative) {
  const auto n = util::canonical_decimal(v, allow_negative);
  if (!n) bad_state(text, "bad number " + util::quote(v));
  return *n;
}

}  // namespace

void PolicyConfig::validate() const {
  if (min_replicas < 1) {
    throw ConfigError("--min-replicas must be at least 1 (got " + str(min_replicas) + ")");
  }
  if (max_replicas < min_replicas) {
    throw ConfigError("--min-replicas/--max-replicas: the minimum " + str(min_replicas) +
                      " is above the maximum " + str(max_replicas));
  }
  if (discrete_values.empty()) {
    if (increment_step < 1) {
      throw ConfigError("--replica-increment-step must be at least 1 (got " + str(increment_step) +
                        ")");
    }
  } else {
    for (size_t i = 0; i < discrete_values.size(); ++i) {
      const int v = discrete_values[i];
      if (v < min_replicas || v > max_replicas) {
        throw ConfigError("--replica-discrete-values: " + str(v) +
                          " is outside --min-replicas/--max-replicas [" + str(min_replicas) + ", " +
                          str(max_replicas) + "]");
      }
      if (i > 0 && v <= discrete_values[i - 1]) {
        throw ConfigError("--replica-discrete-values must be increasing without repeats (" +
                          str(discrete_values[i - 1]) + " then " + str(v) + ")");
      }
    }
  }
  if (scaling_timeout.count() < 0) throw ConfigError("--scaling-timeout must not be negative");
  if (faulty_scale_down_timeout.count() < 0) {
    throw ConfigError("--faulty-scale-down-timeout must not be negative");
  }
  if (min_stable_period.count() < 0) throw ConfigError("--min-stable-period must not be negative");
  if (max_stable_period < min_stable_period) {
    throw ConfigError("--max-stable-period (" + str(max_stable_period) +
                      ") is shorter than --min-stable-period (" + str(min_stable_period) + ")");
  }
}

std::vector<int> allowed_sizes(const PolicyConfig& c) {
  if (!c.discrete_values.empty()) return c.discrete_values;
  std::vector<int> sizes;
  // 64-bit so that max near INT_MAX does not overflow the last step.
  for (int64_t v = c.min_replicas; v <= c.max_replicas; v += c.increment_step) {
    sizes.push_back(static_cast<int>(v));
  }
  return sizes;
}

std::optional<int> largest_allowed_at_most(const PolicyConfig& c, int n) {
  if (!c.discrete_values.empty()) {
    auto it = std::upper_bound(c.discrete_values.begin(), c.discrete_values.end(), n);
    if (it == c.discrete_values.begin()) return std::nullopt;
    return *(it - 1);
  }
  if (n < c.min_replicas) return std::nullopt;
  const int top = std::min(n, c.max_replicas);
  return top - (top - c.min_replicas) % c.increment_step;
}

int smallest_allowed(const PolicyConfig& c) {
  return c.discrete_values.empty() ? c.min_replicas : c.discrete_values.front();
}

Policy::Policy(PolicyConfig config, PolicyState state)
    : config_(std::move(config)), state_(std::move(state)) {
  config_.validate();
}

Millis Policy::stable_period() const {
  return period_at(config_, state_.backoff_level);
}

namespace {

// Applies rule 6 (docs/policy.md) for a voluntary event at `now`.
void record_voluntary_event(const PolicyConfig& c, PolicyState& s, TimeMs now) {
  if (s.last_event) {
    const Millis gap = now - *s.last_event;
    const Millis period = period_at(c, s.backoff_level);
    if (gap < period || gap - period < period) {
      if (s.backoff_level < top_level(c)) ++s.backoff_level;
    } else if (gap >= c.max_stable_period) {
      s.backoff_level = 0;
    }
  }
  s.last_event = now;
}

}  // namespace

Decision Policy::decide(const Observation& o) {
  assert(o.current >= 0 && o.waiting >= 0 && o.leaving >= 0 && o.lost >= 0);
  assert(o.release_request >= 0 && o.leaving + o.lost <= o.current);
  const PolicyConfig& c = config_;

  // Operator requests set the cap before anything else, so that one arriving
  // together with a loss or a departure is not forgotten: that round honours
  // it. A release wins over a scale request of the same observation (it frees
  // nodes someone with a higher priority is waiting for).
  std::string note;
  const bool releasing = o.release_request > 0;
  const bool rescaling = !releasing && o.scale_request.has_value();
  bool release_limited = false;
  if (releasing) {
    // Rounding down never goes below the smallest allowed size, so the
    // minimum bounds the release without a clamp of its own.
    release_limited = o.current - o.release_request < smallest_allowed(c);
    state_.cap = floor_or_smallest(c, o.current - o.release_request);
    if (o.scale_request) {
      note = "scale to " + str(*o.scale_request) + " ignored: a release came with it; ";
    }
  } else if (rescaling) {
    state_.cap = std::clamp(*o.scale_request, c.min_replicas, c.max_replicas);
  }
  const int limit = size_limit(c, state_);
  const std::string limited = "release of " + plural(o.release_request, "node", "nodes") +
                              " limited by --min-replicas " + str(c.min_replicas);
  // Survivors beyond the target give their place back when an operator asked
  // for it; otherwise they stay as spares.
  auto operator_release = [&](int survivors, int target) {
    return releasing || rescaling ? std::max(0, survivors - target) : 0;
  };

  // 1. Lost members: replace them, never delayed, never counted for backoff.
  if (o.lost > 0) {
    Decision d = make(Action::kReplace, floor_or_smallest(c, std::min(o.current, limit)), note);
    const int survivors = o.current - o.lost - o.leaving;
    const int live = survivors + o.waiting;
    d.release = operator_release(survivors, d.target);
    d.reason += "lost " + str(o.lost) + " of " + plural(o.current, "member", "members");
    if (live < smallest_allowed(c)) {
      d.wait_for_replacements = c.faulty_scale_down_timeout;
      d.reason += "; " + plural(live, "live agent is", "live agents are") +
                  " fewer than --min-replicas " + str(c.min_replicas) +
                  ": the next round waits for joins";
    } else if (live >= d.target) {
      d.reason += "; " + plural(live, "live agent fills", "live agents fill") +
                  " the next round of " + str(d.target) + " at once";
    } else {
      d.wait_for_replacements = c.faulty_scale_down_timeout;
      d.reason += "; waiting up to " + str(c.faulty_scale_down_timeout) + " for " + str(d.target) +
                  " before shrinking";
    }
    if (releasing && release_limited) d.reason += "; " + limited;
    state_.waiting_since.reset();
    return d;
  }

  // 2. Members leaving: end the round now (they go regardless). Waiting agents
  // take their places, but growth beyond the current size is rule 5's, after
  // its stabilisation.
  if (o.leaving > 0) {
    const int survivors = o.current - o.leaving;
    const int fit = std::min({limit, survivors + o.waiting, o.current});
    Decision d = make(Action::kScaleDown, 0, note);
    d.reason += plural(o.leaving, "member", "members") + " of " + str(o.current) + " leaving";
    if (auto t = largest_allowed_at_most(c, fit)) {
      d.target = *t;
      d.reason += ": next round " + str(d.target);
    } else {
      d.target = smallest_allowed(c);
      d.reason += ": fewer than " + str(d.target) + " remain, waiting for replacements";
    }
    d.release = operator_release(survivors, d.target);
    if (releasing && release_limited) d.reason += "; " + limited;
    state_.waiting_since.reset();
    return d;
  }

  // 3. A release: answered at once, counted for backoff.
  if (releasing) {
    const int cap = limit;
    if (cap < o.current) {
      Decision d = make(Action::kScaleDown, cap, note);
      d.release = o.current - cap;
      d.reason +=
          release_limited ? limited : "release of " + plural(o.release_request, "node", "nodes");
      d.reason += ": " + str(o.current) + " -> " + str(cap);
      if (!release_limited && d.release > o.release_request) {
        d.reason += " (" + str(o.current - o.release_request) + " is not an allowed size)";
      }
      record_voluntary_event(c, state_, o.now);
      state_.waiting_since.reset();
      return d;
    }
    note += limited + ": already at " + str(o.current) + "; ";
  }

  // 4. A scale request: as far as the agents present allow, at once. The cap
  // stays, so later joiners grow the job to it through rule 5.
  if (rescaling) {
    auto target = largest_allowed_at_most(c, std::min(limit, o.current + o.waiting));
    if (target && *target != o.current) {
      const bool up = *target > o.current;
      Decision d = make(up ? Action::kScaleUp : Action::kScaleDown, *target, note);
      if (!up) d.release = o.current - *target;
      d.reason += "scale to " + str(*o.scale_request) + " requested: " + str(o.current) + " -> " +
                  str(*target);
      if (up && *target < limit) d.reason += ", later joiners grow it up to " + str(limit);
      record_voluntary_event(c, state_, o.now);
      state_.waiting_since.reset();
      return d;
    }
    note += "scale to " + str(*o.scale_request) + " requested: staying at " + str(o.current) + "; ";
  }

  // 5. Voluntary growth onto waiting agents, after they have waited
  // scaling_timeout (a node that comes and goes does not restart the job) and
  // the stable period since the last voluntary event has passed.
  auto candidate = largest_allowed_at_most(c, std::min(limit, o.current + o.waiting));
  if (!candidate || *candidate <= o.current) {
    state_.waiting_since.reset();
    const int reach = std::min(limit, o.current + o.waiting);
    std::string why = "steady at " + str(o.current);
    if (o.waiting > 0) {
      why += "; " + plural(o.waiting, "waiting agent is a spare", "waiting agents are spares");
      if (reach <= o.current) {
        why += ": the size limit is " + str(limit);
      } else if (reach == o.current + 1) {
        why += ": " + str(reach) + " is not an allowed size";
      } else {
        why += ": no allowed size from " + str(o.current + 1) + " to " + str(reach);
      }
    }
    return make(Action::kNone, o.current, note + why);
  }
  if (!state_.waiting_since) state_.waiting_since = o.now;
  const TimeMs stabilised = *state_.waiting_since + c.scaling_timeout;
  const TimeMs stable = state_.last_event ? *state_.last_event + stable_period() : stabilised;
  const TimeMs ready = std::max(stabilised, stable);
  if (o.now >= ready) {
    Decision d = make(Action::kScaleUp, *candidate, note);
    d.reason += plural(o.waiting, "waiting agent", "waiting agents") + ": " + str(o.current) +
                " -> " + str(*candidate);
    record_voluntary_event(c, state_, o.now);
    state_.waiting_since.reset();
    return d;
  }
  Decision d = make(Action::kNone, o.current, note);
  d.recheck_at = ready;
  d.reason += str(o.current) + " -> " + str(*candidate) + " waits " + str(ready - o.now) +
              (stable > stabilised ? " for the stable period (" + str(stable_period()) + ")"
                                   : " for stabilisation (" + str(c.scaling_timeout) + ")");
  return d;
}

std::string PolicyState::serialize() const {
  std::string s = "v1";
  if (last_event) s += ";last=" + std::to_string(last_event->count());
  s += ";lvl=" + std::to_string(backoff_level);
  if (cap) s += ";cap=" + std::to_string(*cap);
  if (waiting_since) s += ";ws=" + std::to_string(waiting_since->count());
  return s;
}

PolicyState PolicyState::parse(const std::string& text) {
  // The leader keeps this in the store; anything longer than a few dozen
  // bytes is not ours.
  constexpr size_t kMaxText = 128;
  if (text.size() > kMaxText) bad_state(text, "longer than " + std::to_string(kMaxText) + " bytes");
  static constexpr std::string_view kKeys[] = {"last", "lvl", "cap", "ws"};
  auto fields = util::split_state_line(text, "v1", kKeys);
  if (!fields)
    bad_state(text, fields.status().context() == "not a v1 state" ? "not a v1 policy state"
                                                                  : fields.status().context());
  PolicyState s;
  bool have_level = false;
  for (const auto& [key, value] : fields.value()) {
    if (key == "last") {
      s.last_event = TimeMs(parse_number(text, value, true));
    } else if (key == "ws") {
      s.waiting_since = TimeMs(parse_number(text, value, true));
    } else {
      const int64_t n = parse_number(text, value, false);
      if (key == "lvl") {
        if (n > std::numeric_limits<int>::max()) bad_state(text, "backoff level out of range");
        s.backoff_level = static_cast<int>(n);
        have_level = true;
      } else {
        if (n < 1 || n > std::numeric_limits<int>::max()) bad_state(text, "cap out of range");
        s.cap = static_cast<int>(n);
      }
    }
  }
  if (!have_level) bad_state(text, "no backoff level");
  return s;
}

}  // namespace elasticrun::elastic
