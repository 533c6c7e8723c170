// The job config's health settings as plain data: HyperPod's log monitoring
// rules (runPolicy.logMonitoringConfiguration) and restart limits
// (runPolicy.restartPolicy, runPolicy.jobMaxRetryCount).
//
// No dependencies on purpose: src/cli fills these in from the YAML file
// without linking src/health (or RE2), and src/health builds its logic from
// them (health/log_rules.hpp, health/restart_policy.hpp). The parser has
// checked types and ranges; patterns are compiled, and so checked, only by
// LogRules::compile, which validation calls before anything starts.
#pragma once

#include <optional>
#include <string>

namespace elasticrun::health {

// How a rule compares the metric (capture group 1) with its threshold:
// the rule counts a data point as violating when `value <op> threshold`.
enum class MetricOperator { kGt, kGteq, kLt, kLteq, kEq };

// One entry of runPolicy.logMonitoringConfiguration (docs/job-config.md).
struct LogRuleSpec {
  std::string name;         // unique within the job; names the verdict (LogHang_<name>)
  std::string log_pattern;  // RE2 syntax, matched anchored at the line's start
  // Seconds from the rules' start (the attempt's) to the first match, after
  // which the rule is HANGING. Absent: no limit. > 0.
  std::optional<double> expected_start_cutoff;
  // Seconds from one match to the next, after which the rule is HANGING.
  // Absent: no limit. > 0.
  std::optional<double> expected_recurring_frequency;
  // Both or neither (the parser refuses one alone): the rule is SLOW after
  // metric_evaluation_data_points consecutive violating matches.
  std::optional<double> metric_threshold;
  std::optional<MetricOperator> op;
  int metric_evaluation_data_points = 1;  // >= 1
  // A line matching this deactivates the rule for good. Absent: always active.
  std::optional<std::string> stop_pattern;
  // The first match faults the job, whatever else the rule says.
  bool fault_on_match = false;
  // Where the rule was written, for messages:
  // "job.yaml, line 12: runPolicy.logMonitoringConfiguration[2]".
  std::string origin;
};

// runPolicy.restartPolicy and runPolicy.jobMaxRetryCount: how failures turn
// into restarts in place, full-job restarts, or the end of the job
// (health/restart_policy.hpp). Each limit is >= 0; an absent one is no limit.
struct RestartPolicySpec {
  // Restarts in place allowed in one evaluation window (counted since the
  // window began or since the last full-job restart) before the next
  // failure escalates to a full-job restart.
  std::optional<int> num_restart_before_full_job_restart;
  // The evaluation window, in seconds (> 0). Absent only when the job config
  // gives jobMaxRetryCount without a restartPolicy: one window for the job's
  // life.
  std::optional<double> eval_period_seconds;
  // Full-job restarts allowed in one evaluation window.
  std::optional<int> max_full_job_restarts;
  // Restarts of either kind over the job's life.
  std::optional<int> job_max_retry_count;
};

}  // namespace elasticrun::health
