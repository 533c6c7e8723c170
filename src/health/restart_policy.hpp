// What a failure costs: a restart in place, a full-job restart, or the end
// of the job. HyperPod's runPolicy.restartPolicy and jobMaxRetryCount, and
// torchrun's --max-restarts (docs/job-config.md).
//
// With a RestartPolicySpec, for each failure at `now`:
// - Evaluation windows are fixed, evalPeriodSeconds long. The first failure
//   opens one; the first failure at or after its end opens the next, and a
//   new window starts both of its counts at zero.
// - The job restarts in place while fewer than numRestartBeforeFullJobRestart
//   restarts in place were made in the window since it began or since its
//   last full-job restart; then the failure escalates to a full-job restart,
//   while fewer than maxFullJobRestarts were made in the window. A full-job
//   restart starts the in-place count at zero again. With no full-job
//   restart left, the job fails.
// - jobMaxRetryCount caps the restarts of both kinds over the job's life,
//   and so does max_restarts (torchrun's --max-restarts) when given: a
//   failure that finds either reached fails the job.
// An absent limit is no limit. Without a spec, a failure restarts in place
// while fewer than max_restarts (default 0, as torchrun's) restarts were
// made, as torchrun does.
//
// Pure logic: time is wall-clock milliseconds since the epoch, passed in,
// because the state (RestartState) lives in the store and whichever agent
// sees the next failure continues it, on its own clock. A clock that went
// back puts a failure into the current window.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "health/specs.hpp"

namespace elasticrun::health {

using WallTime = std::chrono::sys_time<std::chrono::milliseconds>;

enum class RestartAction {
  kInPlace,  // restart the workers (process-level)
  kFullJob,  // a full-job restart: the caller discards per-node state
  kFail,     // no restart left: the job fails
};
// "in_place", "full", "fail": the names the static restarts' decision key
// and the event log use.
const char* to_string(RestartAction action);

struct RestartDecision {
  RestartAction action = RestartAction::kFail;
  std::string reason;  // one line for logs and the failure report, naming the limits
};

// The counts, kept in the store so that any agent can continue them.
struct RestartState {
  std::optional<WallTime> window_start;  // absent before the first failure
  int in_place = 0;  // restarts in place in the window, since it began or its last full-job restart
  int full_job = 0;  // full-job restarts in the window
  int total = 0;     // restarts of both kinds over the job's life

  // "v1;win=<ms>;inplace=<n>;full=<n>;total=<n>", win left out when absent:
  // "v1;inplace=0;full=0;total=0" for a fresh state. One line.
  std::string serialize() const;
  // The inverse of serialize(), for every state a RestartPolicy can reach
  // (counts >= 0, in_place + full_job <= total, window at or after the
  // epoch). Throws ConfigError naming the text for any other: unknown
  // version or key, keys out of order, repeated or missing, numbers not in
  // canonical decimal or out of range.
  static RestartState parse(const std::string& text);
  bool operator==(const RestartState&) const = default;
};

class RestartPolicy {
 public:
  // `spec`: the job config's (absent: torchrun's plain --max-restarts);
  // `max_restarts`: --max-restarts when given. The state may come from the
  // store, written under another config: counts beyond the limits fail the
  // next failure. Throws ConfigError for a negative limit or a window that
  // is not a positive number of seconds.
  RestartPolicy(std::optional<RestartPolicySpec> spec, std::optional<int> max_restarts,
                RestartState state = {});

  // Decides for one failure at `now` and updates the state as if the
  // decision were carried out (the caller publishes it). kFail leaves the
  // state as it was.
  RestartDecision on_failure(WallTime now);

  const RestartState& state() const { return state_; }

 private:
  std::optional<RestartPolicySpec> spec_;
  std::optional<int> max_restarts_;
  std::optional<std::chrono::milliseconds> window_;  // evalPeriodSeconds
  RestartState state_;
};

}  // namespace elasticrun::health
