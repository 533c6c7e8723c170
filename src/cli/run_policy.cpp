#include "cli/run_policy.hpp"

#include <charconv>
#include <cmath>
#include <map>
#include <system_error>

#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

std::string number_text(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "?";
}

class RunPolicyReader {
 public:
  RunPolicyReader(const YamlReader& r, JobConfig& c) : r_(r), c_(c) {}

  void read(const YAML::Node& section_key, const YAML::Node& section) {
    std::optional<FileValue<int>> job_max;
    r_.for_each_key(section, section_key, "runPolicy",
                    {"jobMaxRetryCount", "restartPolicy", "logMonitoringConfiguration",
                     "cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                     "faultDeadlineSeconds", "startupDeadlineSeconds", "suspend", "workloadMode"},
                    [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                      const std::string path = "runPolicy." + key;
                      if (key == "jobMaxRetryCount") {
                        job_max = FileValue<int>{r_.at_least(k, v, path, 0), r_.origin(k, path)};
                      } else if (key == "restartPolicy") {
                        restart_policy(k, v, path);
                      } else if (key == "logMonitoringConfiguration") {
                        rules(k, v, path);
                      } else {
                        // Checked as HyperPod's job spec types them, then left alone.
                        if (key == "cleanPodPolicy" || key == "workloadMode") {
                          r_.text(k, v, path);
                        } else if (key == "suspend") {
                          r_.boolean(k, v, path);
                        } else {
                          r_.integer(k, v, path);
                        }
                        ignored(k, path);
                      }
                    });
    if (!job_max) return;
    auto& policy = c_.restart_policy;
    if (!policy) policy = FileValue<health::RestartPolicySpec>{{}, job_max->origin};
    policy->value.job_max_retry_count = job_max->value;
  }

 private:
  void restart_policy(const YAML::Node& section_key, const YAML::Node& section,
                      const std::string& path) {
    if (section.IsNull()) return;  // "restartPolicy:" with nothing under it
    health::RestartPolicySpec spec;
    r_.for_each_key(section, section_key, path,
                    {"numRestartBeforeFullJobRestart", "evalPeriodSeconds", "maxFullJobRestarts",
                     "maxNumRepeatOffendersToAvoid", "scaleUpSnoozeTimeInSeconds"},
                    [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                      const std::string item = path + "." + key;
                      if (key == "numRestartBeforeFullJobRestart") {
                        spec.num_restart_before_full_job_restart = r_.at_least(k, v, item, 0);
                      } else if (key == "evalPeriodSeconds") {
                        spec.eval_period_seconds = positive_seconds(k, v, item);
                      } else if (key == "maxFullJobRestarts") {
                        spec.max_full_job_restarts = r_.at_least(k, v, item, 0);
                      } else {
                        // Which nodes a full-job restart avoids, and when the job may
                        // grow after one, are the operator's to decide.
                        r_.at_least(k, v, item, 0);
                        ignored(k, item);
                      }
                    });
    if (!spec.eval_period_seconds) {
      r_.fail(section, section_key, path,
              "no evalPeriodSeconds: a restartPolicy needs one (HyperPod's job spec requires it "
              "too)");
    }
    c_.restart_policy = FileValue<health::RestartPolicySpec>{spec, r_.origin(section_key, path)};
  }

  void rules(const YAML::Node& section_key, const YAML::Node& section, const std::string& path) {
    if (section.IsNull()) return;
    if (!section.IsSequence()) {
      r_.fail(section, section_key, path,
              "expected a list of rules, got " + YamlReader::describe(section));
    }
    std::map<std::string, std::string> names;  // name -> where it was given
    for (size_t i = 0; i < section.size(); ++i) {
      rule(section_key, section[i], path + "[" + std::to_string(i) + "]", names);
    }
  }

  void rule(const YAML::Node& list_key, const YAML::Node& item, const std::string& at,
            std::map<std::string, std::string>& names) {
    if (!item.IsMap()) {
      r_.fail(item, list_key, at,
              "expected a mapping (name, logPattern, ...), got " + YamlReader::describe(item));
    }
    health::LogRuleSpec rule;
    rule.origin = r_.where(item, list_key) + ": " + at;
    YAML::Node name_key, threshold_key, op_key;  // the keys given, for messages
    std::optional<std::string> points_at;        // where metricEvaluationDataPoints was given
    r_.for_each_key(item, list_key, at,
                    {"name", "logPattern", "expectedStartCutOffInSeconds",
                     "expectedRecurringFrequencyInSeconds", "metricThreshold", "operator",
                     "metricEvaluationDataPoints", "stopPattern", "faultOnMatch"},
                    [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                      const std::string p = at + "." + key;
                      if (key == "name") {
                        rule.name = r_.text(k, v, p);
                        if (rule.name.empty()) r_.fail(v, k, p, "must not be empty");
                        name_key = k;
                      } else if (key == "logPattern") {
                        rule.log_pattern = pattern(k, v, p);
                      } else if (key == "expectedStartCutOffInSeconds") {
                        rule.expected_start_cutoff = positive_seconds(k, v, p);
                      } else if (key == "expectedRecurringFrequencyInSeconds") {
                        rule.expected_recurring_frequency = positive_seconds(k, v, p);
                      } else if (key == "metricThreshold") {
                        rule.metric_threshold = r_.number(k, v, p);
                        integral_in_hyperpod(k, p, *rule.metric_threshold);
                        threshold_key = k;
                      } else if (key == "operator") {
                        rule.op = metric_operator(k, v, p);
                        op_key = k;
                      } else if (key == "metricEvaluationDataPoints") {
                        rule.metric_evaluation_data_points = r_.at_least(k, v, p, 1);
                        points_at = r_.origin(k, p);
                      } else if (key == "stopPattern") {
                        rule.stop_pattern = pattern(k, v, p);
                      } else {
                        rule.fault_on_match = r_.boolean(k, v, p);
                      }
                    });
    if (rule.name.empty()) {
      r_.fail(item, list_key, at, "no name: every rule needs one (it names the fault)");
    }
    if (rule.log_pattern.empty()) {
      r_.fail(item, list_key, at, "no logPattern: the regular expression the rule watches for");
    }
    if (rule.metric_threshold && !rule.op) {
      r_.fail(threshold_key, threshold_key, at + ".metricThreshold",
              "needs an operator (gt, gteq, lt, lteq or eq) to compare the metric with it");
    }
    if (rule.op && !rule.metric_threshold) {
      r_.fail(op_key, op_key, at + ".operator",
              "needs a metricThreshold to compare the metric with");
    }
    const auto [first, fresh] = names.emplace(rule.name, r_.origin(name_key, at + ".name"));
    if (!fresh) {
      r_.fail(name_key, name_key, at + ".name",
              util::quote(rule.name) + " is given twice (first at " + first->second + ")");
    }
    // Not errors (HyperPod takes them), but not what their author meant either.
    if (points_at && !rule.metric_threshold) {
      c_.notes.push_back(*points_at + ": has no effect without metricThreshold and operator");
    }
    if (!rule.expected_start_cutoff && !rule.expected_recurring_frequency &&
        !rule.metric_threshold && !rule.fault_on_match) {
      c_.notes.push_back(rule.origin + " (" + util::quote(rule.name) +
                         ") judges nothing: give it expectedStartCutOffInSeconds, "
                         "expectedRecurringFrequencyInSeconds, metricThreshold with operator, "
                         "or faultOnMatch");
    }
    c_.log_rules.push_back(std::move(rule));
  }

  health::MetricOperator metric_operator(const YAML::Node& k, const YAML::Node& v,
                                         const std::string& path) const {
    const std::string op = r_.text(k, v, path);
    if (op == "gt") return health::MetricOperator::kGt;
    if (op == "gteq") return health::MetricOperator::kGteq;
    if (op == "lt") return health::MetricOperator::kLt;
    if (op == "lteq") return health::MetricOperator::kLteq;
    if (op == "eq") return health::MetricOperator::kEq;
    r_.fail(v, k, path, "expected one of gt, gteq, lt, lteq, eq, got " + YamlReader::describe(v));
  }

  std::string pattern(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
    std::string p = r_.text(k, v, path);
    if (p.empty()) r_.fail(v, k, path, "must not be empty: it would match every line");
    return p;
  }

  double positive_seconds(const YAML::Node& k, const YAML::Node& v, const std::string& path) {
    const double seconds = r_.number(k, v, path);
    if (seconds <= 0) r_.fail(v, k, path, "must be more than 0 seconds");
    integral_in_hyperpod(k, path, seconds);
    return seconds;
  }

  // HyperPod's job spec types these numbers as integers, so it would refuse
  // 2.5 (and its agent truncates a threshold to an integer); elasticrun
  // takes the value as written, and says so.
  void integral_in_hyperpod(const YAML::Node& k, const std::string& path, double value) {
    if (value == std::floor(value)) return;
    c_.notes.push_back(r_.origin(k, path) + " " + util::quote(number_text(value)) +
                       ": HyperPod's job spec takes only an integer here; elasticrun uses " +
                       number_text(value));
  }

  void ignored(const YAML::Node& k, const std::string& path) {
    c_.notes.push_back(r_.origin(k, path) + " is HyperPod's operator's; elasticrun ignores it");
  }

  const YamlReader& r_;
  JobConfig& c_;
};

}  // namespace

void read_run_policy(const YamlReader& r, const YAML::Node& section_key, const YAML::Node& section,
                     JobConfig& c) {
  RunPolicyReader(r, c).read(section_key, section);
}

}  // namespace elasticrun::cli
