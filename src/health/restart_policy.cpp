// The restart policy; the rules are in the header, in the order on_failure
// applies them.
#include "health/restart_policy.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>

#include "elasticrun/errors.hpp"
#include "util/state_line.hpp"
#include "util/strings.hpp"

namespace elasticrun::health {

const char* to_string(RestartAction action) {
  switch (action) {
    case RestartAction::kInPlace:
      return "in_place";
    case RestartAction::kFullJob:
      return "full";
    case RestartAction::kFail:
      return "fail";
  }
  return "fail";
}

namespace {

using Millis = std::chrono::milliseconds;

// A window longer than this (about 31,700 years) is as good as endless, and
// keeps window arithmetic far from overflow.
constexpr int64_t kLongestWindowMs = 1'000'000'000'000'000;

std::string of(int n, const std::optional<int>& limit) {
  return std::to_string(n) + (limit ? " of " + std::to_string(*limit) : "");
}

[[noreturn]] void bad_state(const std::string& text, const std::string& why) {
  throw ConfigError("restart state " + util::quote(text) + ": " + why);
}

int64_t parse_number(const std::string& text, std::string_view v, int64_t max) {
  const auto n = util::canonical_decimal(v);
  if (!n) bad_state(text, "bad number " + util::quote(v));
  if (*n > max) bad_state(text, "number out of range " + util::quote(v));
  return *n;
}

}  // namespace

RestartPolicy::RestartPolicy(std::optional<RestartPolicySpec> spec, std::optional<int> max_restarts,
                             RestartState state)
    : spec_(std::move(spec)), max_restarts_(max_restarts), state_(std::move(state)) {
  if (max_restarts_ && *max_restarts_ < 0) {
    throw ConfigError("--max-restarts must not be negative (got " + std::to_string(*max_restarts_) +
                      ")");
  }
  if (!spec_) return;
  const auto non_negative = [](const std::optional<int>& v, const char* key) {
    if (v && *v < 0) {
      throw ConfigError(std::string(key) + " must not be negative (got " + std::to_string(*v) +
                        ")");
    }
  };
  non_negative(spec_->num_restart_before_full_job_restart,
               "runPolicy.restartPolicy.numRestartBeforeFullJobRestart");
  non_negative(spec_->max_full_job_restarts, "runPolicy.restartPolicy.maxFullJobRestarts");
  non_negative(spec_->job_max_retry_count, "runPolicy.jobMaxRetryCount");
  if (const auto& period = spec_->eval_period_seconds) {
    if (!std::isfinite(*period) || *period <= 0) {
      throw ConfigError("runPolicy.restartPolicy.evalPeriodSeconds must be a positive number");
    }
    window_ = Millis(std::max<int64_t>(
        1, std::llround(std::min(*period * 1000, static_cast<double>(kLongestWindowMs)))));
  }
}

RestartDecision RestartPolicy::on_failure(WallTime now) {
  RestartState s = state_;
  const auto fail = [](std::string reason) {
    return RestartDecision{RestartAction::kFail, std::move(reason)};
  };
  const auto commit = [&](RestartAction action, std::string reason) {
    state_ = s;
    return RestartDecision{action, std::move(reason)};
  };

  if (!spec_) {
    const int limit = max_restarts_.value_or(0);
    if (s.total >= limit) {
      return fail("--max-restarts " + std::to_string(limit) +
                  " reached: " + std::to_string(s.total) + " restarts made");
    }
    ++s.total;
    return commit(RestartAction::kInPlace, "restart " + of(s.total, limit) + " (--max-restarts)");
  }

  // A window opens at a failure and holds the failures up to, not
  // including, its end. Without evalPeriodSeconds the first one never ends.
  const bool new_window = !s.window_start || (window_ && now - *s.window_start >= *window_);
  const Millis into = new_window ? Millis(0) : std::max(Millis(0), now - *s.window_start);
  if (new_window) {
    s.window_start = now;
    s.in_place = 0;
    s.full_job = 0;
  }

  const auto& job_max = spec_->job_max_retry_count;
  if (job_max && s.total >= *job_max) {
    return fail("jobMaxRetryCount " + std::to_string(*job_max) +
                " reached: " + std::to_string(s.total) + " restarts made");
  }
  if (max_restarts_ && s.total >= *max_restarts_) {
    return fail("--max-restarts " + std::to_string(*max_restarts_) +
                " reached: " + std::to_string(s.total) + " restarts made");
  }

  const auto& in_place_limit = spec_->num_restart_before_full_job_restart;
  const auto& full_limit = spec_->max_full_job_restarts;
  // Where the window stands matters only when something is counted in it.
  std::string window;
  if (window_ && (in_place_limit || full_limit)) {
    window = new_window ? " in a new evaluation window of " + util::seconds_text(*window_)
                        : " in the evaluation window, " + util::seconds_text(into) + " into its " +
                              util::seconds_text(*window_);
  }
  const auto totals = [&] {
    std::string t = "; restart " + of(s.total, job_max) + " over the job";
    if (job_max) t += " (jobMaxRetryCount)";
    if (max_restarts_) t += ", " + of(s.total, max_restarts_) + " (--max-restarts)";
    return t;
  };

  if (!in_place_limit || s.in_place < *in_place_limit) {
    ++s.in_place;
    ++s.total;
    std::string reason = "restart in place";
    if (in_place_limit) {
      reason += " " + of(s.in_place, in_place_limit) + " (numRestartBeforeFullJobRestart)";
    }
    return commit(RestartAction::kInPlace, reason + window + totals());
  }

  const std::string used = std::to_string(s.in_place) +
                           " restarts in place used (numRestartBeforeFullJobRestart " +
                           std::to_string(*in_place_limit) + ")";
  if (!full_limit || s.full_job < *full_limit) {
    ++s.full_job;
    ++s.total;
    s.in_place = 0;
    std::string reason = used + ": full-job restart " + of(s.full_job, full_limit);
    if (full_limit) reason += " (maxFullJobRestarts)";
    return commit(RestartAction::kFullJob, reason + window + totals());
  }
  return fail(used + " and " + std::to_string(s.full_job) +
              " full-job restarts (maxFullJobRestarts " + std::to_string(*full_limit) + ")" +
              window);
}

std::string RestartState::serialize() const {
  std::string s = "v1";
  if (window_start) s += ";win=" + std::to_string(window_start->time_since_epoch().count());
  s += ";inplace=" + std::to_string(in_place);
  s += ";full=" + std::to_string(full_job);
  s += ";total=" + std::to_string(total);
  return s;
}

RestartState RestartState::parse(const std::string& text) {
  // The agents keep this in the store; anything longer than a few dozen
  // bytes is not ours.
  constexpr size_t kMaxText = 128;
  if (text.size() > kMaxText) bad_state(text, "longer than " + std::to_string(kMaxText) + " bytes");
  static constexpr std::string_view kKeys[] = {"win", "inplace", "full", "total"};
  auto fields = util::split_state_line(text, "v1", kKeys);
  if (!fields)
    bad_state(text, fields.status().context() == "not a v1 state" ? "not a v1 restart state"
                                                                  : fields.status().context());
  constexpr int64_t kMaxCount = std::numeric_limits<int>::max();
  RestartState s;
  // Only the window may be left out: the counts come one after another.
  size_t next = 0;
  for (const auto& [key, value] : fields.value()) {
    if (key == "win") {
      s.window_start = WallTime(Millis(
          parse_number(text, value, std::numeric_limits<int64_t>::max() - kLongestWindowMs)));
      next = 1;
      continue;
    }
    next = std::max<size_t>(next, 1);
    if (key != kKeys[next])
      bad_state(text, "unknown, repeated or misplaced key " + util::quote(key));
    ++next;
    const int n = static_cast<int>(parse_number(text, value, kMaxCount));
    (key == "inplace" ? s.in_place : key == "full" ? s.full_job : s.total) = n;
  }
  if (next < std::size(kKeys)) {
    bad_state(text, "no " + std::string(kKeys[std::max<size_t>(next, 1)]));
  }
  if (static_cast<int64_t>(s.in_place) + s.full_job > s.total) {
    bad_state(text, "more restarts in the window than in total");
  }
  return s;
}

}  // namespace elasticrun::health
