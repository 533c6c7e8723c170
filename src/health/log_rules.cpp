// The log rules. evaluate() is HyperPod's LogEvaluator.evaluate, step for
// step (the order matters: a fault on match comes before the stop pattern,
// the time checks before the metric); the header says what each step means.
#include "health/log_rules.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::health {

namespace {

// Of a matched line, what a message shows.
constexpr size_t kLineKept = 200;

using Seconds = std::chrono::duration<double>;

std::unique_ptr<RE2> compile_pattern(const std::string& pattern, const std::string& what) {
  RE2::Options options;
  options.set_log_errors(false);  // the error goes into the ConfigError, not to stderr
  auto re = std::make_unique<RE2>(pattern, options);
  if (!re->ok()) {
    throw ConfigError(what + " " + util::quote(pattern) + ": RE2 refuses it: " + re->error() +
                      " (patterns are RE2's syntax: no lookaround, no backreferences)");
  }
  return re;
}

bool matches(const RE2& re, std::string_view line, re2::StringPiece* groups, int n) {
  return re.Match(re2::StringPiece(line.data(), line.size()), 0, line.size(), RE2::ANCHOR_START,
                  groups, n);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Python's float() of a str, for ASCII text: surrounding whitespace, a sign,
// decimal digits with an optional fraction and exponent, underscores between
// digits, "inf", "infinity" and "nan" in any case. nullopt where float()
// raises.
std::optional<double> python_float(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  // from_chars also takes "nan(...)", which float() does not; and it takes
  // no underscores, which float() allows between two digits.
  std::string digits;
  if (text.find_first_of("_(") != std::string_view::npos) {
    if (text.find('(') != std::string_view::npos) return std::nullopt;
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '_') {
        digits += text[i];
      } else if (i == 0 || i + 1 == text.size() || !digit(text[i - 1]) || !digit(text[i + 1])) {
        return std::nullopt;
      }
    }
    text = digits;
  }
  // A sign after the sign ("--1", "+-1") is not a number; from_chars would take "-1".
  if (text.empty() || text.front() == '+' || text.front() == '-') return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return negative ? -value : value;
}

bool violates(MetricOperator op, double value, double threshold) {
  switch (op) {
    case MetricOperator::kGt:
      return value > threshold;
    case MetricOperator::kGteq:
      return value >= threshold;
    case MetricOperator::kLt:
      return value < threshold;
    case MetricOperator::kLteq:
      return value <= threshold;
    case MetricOperator::kEq:
      return value == threshold;
  }
  return false;
}

const char* symbol(MetricOperator op) {
  switch (op) {
    case MetricOperator::kGt:
      return ">";
    case MetricOperator::kGteq:
      return ">=";
    case MetricOperator::kLt:
      return "<";
    case MetricOperator::kLteq:
      return "<=";
    case MetricOperator::kEq:
      return "==";
  }
  return "?";
}

std::string number_text(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "?";
}

std::string seconds_text(Clock::duration d) {
  return util::seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(d));
}

std::string seconds_text(double seconds) {
  return util::seconds_text(std::chrono::milliseconds(std::llround(seconds * 1000)));
}

}  // namespace

class LogRules::Compiled {
 public:
  struct Rule {
    LogRuleSpec spec;
    std::unique_ptr<RE2> pattern;
    std::unique_ptr<RE2> stop;  // null without a stopPattern
    bool metric = false;        // threshold and operator given (and a group to read)
  };
  std::vector<Rule> rules;
};

std::shared_ptr<const LogRules::Compiled> LogRules::compile(std::vector<LogRuleSpec> specs) {
  auto compiled = std::make_shared<Compiled>();
  compiled->rules.reserve(specs.size());
  for (auto& spec : specs) {
    // The parser checked these (src/cli/job_config.cpp), naming file, line and key.
    assert(!spec.name.empty() && spec.metric_evaluation_data_points >= 1);
    assert(spec.metric_threshold.has_value() == spec.op.has_value());
    Compiled::Rule rule;
    rule.pattern = compile_pattern(spec.log_pattern, spec.origin + ".logPattern");
    if (spec.stop_pattern) {
      rule.stop = compile_pattern(*spec.stop_pattern, spec.origin + ".stopPattern");
    }
    rule.metric = spec.metric_threshold && spec.op;
    if (rule.metric && rule.pattern->NumberOfCapturingGroups() < 1) {
      // HyperPod's agent accepts this and never evaluates the metric: a rule
      // that silently cannot fire is worse than a refusal.
      throw ConfigError(spec.origin + ".logPattern " + util::quote(spec.log_pattern) +
                        ": has no capture group, so metricThreshold has no metric to compare "
                        "(group 1 is the metric)");
    }
    rule.spec = std::move(spec);
    compiled->rules.push_back(std::move(rule));
  }
  return compiled;
}

LogRules::LogRules(std::shared_ptr<const Compiled> rules, Clock::time_point start)
    : rules_(std::move(rules)), start_(start), states_(rules_->rules.size()) {}

LogRules::LogRules(std::vector<LogRuleSpec> specs, Clock::time_point start)
    : LogRules(compile(std::move(specs)), start) {}

size_t LogRules::size() const {
  return states_.size();
}

std::optional<Fault> LogRules::on_line(Clock::time_point now, std::string_view line) {
  if (faulted_) return std::nullopt;
  for (size_t i = 0; i < states_.size(); ++i) evaluate(i, now, &line);
  return verdict(now);
}

std::optional<Fault> LogRules::check(Clock::time_point now) {
  if (faulted_) return std::nullopt;
  for (size_t i = 0; i < states_.size(); ++i) evaluate(i, now, nullptr);
  return verdict(now);
}

void LogRules::evaluate(size_t i, Clock::time_point now, const std::string_view* line) {
  const Compiled::Rule& rule = rules_->rules[i];
  const LogRuleSpec& spec = rule.spec;
  RuleState& s = states_[i];
  if (!s.active) {
    s.state = State::kHealthy;
    return;
  }

  bool matched = false;
  re2::StringPiece groups[2];
  if (line) {
    // Group 1 is wanted only to read a metric; without it RE2 stays on its DFA.
    matched = matches(*rule.pattern, *line, groups, rule.metric ? 2 : 0);
    if (matched) {
      s.last_match = now;
      s.last_line.assign(line->substr(0, kLineKept));
      s.last_line_size = line->size();
      if (spec.fault_on_match) {
        s.state = State::kFaulted;
        return;
      }
    }
    if (rule.stop && matches(*rule.stop, *line, nullptr, 0)) {
      s.active = false;
      s.state = State::kHealthy;
      return;
    }
  }

  if (spec.expected_start_cutoff && !s.last_match &&
      now - start_ > Seconds(*spec.expected_start_cutoff)) {
    s.state = State::kHanging;
    s.hang = Hang::kNoFirstMatch;
    return;
  }
  if (spec.expected_recurring_frequency && s.last_match &&
      now - *s.last_match > Seconds(*spec.expected_recurring_frequency)) {
    s.state = State::kHanging;
    s.hang = Hang::kNoRecurrence;
    return;
  }
  if (!matched) return;
  if (!rule.metric) {
    s.state = State::kHealthy;
    return;
  }

  // A group that did not take part has no data: HyperPod's float(None) raises too.
  const auto value = groups[1].data()
                         ? python_float(std::string_view(groups[1].data(), groups[1].size()))
                         : std::nullopt;
  if (!value) return;
  s.last_value = *value;
  const int n = spec.metric_evaluation_data_points;
  s.violations =
      violates(*spec.op, *value, *spec.metric_threshold) ? std::min(s.violations + 1, n) : 0;
  s.state = s.violations >= n ? State::kSlow : State::kHealthy;
}

std::optional<Fault> LogRules::verdict(Clock::time_point now) {
  std::optional<size_t> worst;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State st = states_[i].state;
    if (st != State::kSlow && st != State::kHanging && st != State::kFaulted) continue;
    if (!worst || st > states_[*worst].state) worst = i;
  }
  if (!worst) return std::nullopt;
  Fault f;
  const State st = states_[*worst].state;
  f.kind = st == State::kSlow      ? FaultKind::kLogSlow
           : st == State::kHanging ? FaultKind::kLogHang
                                   : FaultKind::kLogFault;
  f.monitor = rules_->rules[*worst].spec.name;
  f.message = message(*worst, now);
  faulted_ = true;
  return f;
}

std::string LogRules::message(size_t i, Clock::time_point now) const {
  const LogRuleSpec& spec = rules_->rules[i].spec;
  const RuleState& s = states_[i];
  std::string last = util::quote(s.last_line, kLineKept);
  if (s.last_line_size > s.last_line.size()) {
    last += "... (" + std::to_string(s.last_line_size) + " bytes)";
  }
  const std::string pattern = util::quote(spec.log_pattern);
  std::string m = "rule " + util::quote(spec.name) + ": ";
  switch (s.state) {
    case State::kFaulted:
      m += "a line matched " + pattern + ", which faults the job (faultOnMatch): " + last;
      break;
    case State::kHanging:
      if (s.hang == Hang::kNoFirstMatch) {
        m += "no line matched " + pattern + " in the " + seconds_text(now - start_) +
             " since the start, more than " + seconds_text(*spec.expected_start_cutoff) +
             " (expectedStartCutOffInSeconds)";
      } else {
        m += "no line matched " + pattern + " for " + seconds_text(now - *s.last_match) +
             ", more than " + seconds_text(*spec.expected_recurring_frequency) +
             " (expectedRecurringFrequencyInSeconds); the last match: " + last;
      }
      break;
    default: {
      const int n = spec.metric_evaluation_data_points;
      const std::string limit =
          std::string(symbol(*spec.op)) + " " + number_text(*spec.metric_threshold);
      m += n == 1 ? "the value " + number_text(s.last_value) + " " + limit
                  : std::to_string(n) + " consecutive values " + limit +
                        " (metricEvaluationDataPoints " + std::to_string(n) + "), the last " +
                        number_text(s.last_value);
      m += ": " + last;
      break;
    }
  }
  return m;
}

}  // namespace elasticrun::health
