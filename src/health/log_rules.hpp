// HyperPod's log monitoring rules: a worker's output, line by line, judged
// healthy, SLOW, HANGING or FAULTED, with the semantics of HyperPod's elastic
// agent (its LogEvaluator; docs/job-config.md has the user's view):
//
// - logPattern matches anchored at the start of the line (Python's
//   re.match), which is why HyperPod's patterns begin with ".*".
// - A match records the time and the line; with faultOnMatch it faults at
//   once, before stopPattern is looked at.
// - A line matching stopPattern deactivates the rule for good.
// - HANGING: no match within expectedStartCutOffInSeconds of the start, or
//   more than expectedRecurringFrequencyInSeconds since the previous match
//   (the first interval starts at the first match: a rule with only a
//   frequency cannot hang before it matched once). Strictly more: a gap of
//   exactly the limit is fine. A match is recorded before the time is
//   looked at, so a matching line that comes late restarts the frequency
//   instead of hanging: only a check() (or a line that does not match)
//   while the gap lasts sees it.
// - SLOW: capture group 1 is the metric; metricEvaluationDataPoints
//   consecutive matches whose metric violates `value <op> threshold` make
//   the rule SLOW, and one good value resets the count.
// - A line that does not match leaves the rule's state as it was (a SLOW
//   rule stays SLOW until a good value comes).
// - A metric that is not a number (Python's float() refuses it, or group 1
//   did not take part in the match) is no data point: the match counts for
//   the time checks, the count and the state stay as they were. That is
//   what HyperPod's agent ends up doing when float() raises (it also skips
//   the line for the rules after this one, which we do not copy).
//
// Deliberate differences: patterns are RE2's syntax (linear time whatever
// the line; no lookaround or backreferences) rather than Python's, and a
// rule that compares a metric its pattern cannot capture is refused rather
// than never evaluated. Each attempt gets its own LogRules, so the start
// cut-off counts from the attempt's start (HyperPod keeps its evaluators
// across restarts, suspended).
//
// Pure logic: no clock, no I/O. The caller stamps each line with a time and
// calls check() whenever no line came for a second (as HyperPod's agent
// does), which is how long a hang may go unseen.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "health/fault.hpp"
#include "health/specs.hpp"

namespace elasticrun::health {

using Clock = std::chrono::steady_clock;

class LogRules {
 public:
  // The rules with their patterns compiled: immutable, shared by the
  // LogRules of every attempt.
  class Compiled;

  // Compiles every pattern with RE2. Throws ConfigError naming the rule's
  // origin, the key and RE2's message for a pattern RE2 refuses, and for a
  // rule that compares a metric with a pattern that has no capture group.
  // Validation of the job config calls this, so a bad rule exits 2 before
  // anything starts.
  static std::shared_ptr<const Compiled> compile(std::vector<LogRuleSpec> specs);

  // The rules in their initial state (no match yet); `start` is the
  // attempt's start, from which the start cut-offs count.
  LogRules(std::shared_ptr<const Compiled> rules, Clock::time_point start);
  // compile(specs), then the above. Throws ConfigError as compile() does.
  LogRules(std::vector<LogRuleSpec> specs, Clock::time_point start);

  // Judges one line (without its terminator) of the watched stream, read at
  // `now`, and the time since the matches before. Returns the fault to act
  // on, if a rule judged the attempt SLOW, HANGING or FAULTED: a Fault of
  // kind kLogSlow, kLogHang or kLogFault whose monitor is the rule's name
  // (so reason() is HyperPod's LogSlow_<rule>, ...) and whose message says
  // what matched or did not, the limit, and the last matched line. Of
  // several, the most severe (FAULTED > HANGING > SLOW), and among equals
  // the first rule of the config. local_rank and last_step stay -1: the
  // caller knows whose stream it fed. Once it returned a fault it returns no
  // other: the caller ends the attempt and builds new rules for the next.
  // Lines may be long: matching takes time linear in the line, and only
  // ~200 bytes of a matched line are kept.
  std::optional<Fault> on_line(Clock::time_point now, std::string_view line);

  // Judges the time alone (no line came): the cut-offs and frequencies, and
  // the states rules already hold. Returns what on_line would.
  std::optional<Fault> check(Clock::time_point now);

  // The number of rules.
  size_t size() const;

 private:
  enum class State { kWaiting, kHealthy, kSlow, kHanging, kFaulted };
  enum class Hang { kNoFirstMatch, kNoRecurrence };

  struct RuleState {
    State state = State::kWaiting;
    bool active = true;  // false once stopPattern matched
    std::optional<Clock::time_point> last_match;
    std::string last_line;            // the first kLineKept bytes of the last matched line
    size_t last_line_size = 0;        // its full size
    int violations = 0;               // consecutive violating data points, at most the rule's N
    double last_value = 0;            // the last metric that counted as a data point
    Hang hang = Hang::kNoFirstMatch;  // why, when state is kHanging
  };

  // HyperPod's evaluate(line) for rule i; `line` is null for check().
  void evaluate(size_t i, Clock::time_point now, const std::string_view* line);
  std::optional<Fault> verdict(Clock::time_point now);
  std::string message(size_t i, Clock::time_point now) const;

  std::shared_ptr<const Compiled> rules_;
  Clock::time_point start_;
  std::vector<RuleState> states_;
  bool faulted_ = false;
};

}  // namespace elasticrun::health
