// The job config file (--config FILE, YAML; the schema is docs/job-config.md):
// hyperpodrun's elasticPolicy block plus our stable periods, HyperPod's
// runPolicy (restart limits and log monitoring rules), and per-world-size
// hyperparameters for the worker SDK.
//
// Strict on purpose: an unknown key, a key given twice, or a value of the
// wrong type is a ConfigError naming the file, the line and the key, because
// a misspelt "maxReplica" silently ignored would run the job at the wrong size.
// Ranges (min <= max, ...) are checked later, after the command line has
// overridden what it overrides (cli/elastic_parse.hpp). Log rules' patterns
// are compiled, and so checked, by health::LogRules::compile: src/cli knows
// the rules only as plain data (health/specs.hpp), not RE2.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/elastic_options.hpp"
#include "health/specs.hpp"

namespace elasticrun::cli {

// A value from the file and where it was: "job.yaml, line 3: elasticPolicy.minReplicas".
template <class T>
struct FileValue {
  T value;
  std::string origin;
};

// What the file says; absent keys are nullopt (or empty).
struct JobConfig {
  std::optional<FileValue<int>> min_replicas;
  std::optional<FileValue<int>> max_replicas;
  std::optional<FileValue<int>> replica_increment_step;
  std::optional<FileValue<std::vector<int>>> replica_discrete_values;
  std::optional<FileValue<double>> graceful_shutdown_timeout;
  std::optional<FileValue<double>> scaling_timeout;
  std::optional<FileValue<double>> faulty_scale_down_timeout;
  std::optional<FileValue<double>> min_stable_period;
  std::optional<FileValue<double>> max_stable_period;
  WorldSizeOverrides world_size_overrides;
  // Where each world size of world_size_overrides was given, for notes.
  std::map<int, std::string> world_size_origins;

  // runPolicy.restartPolicy with runPolicy.jobMaxRetryCount, present when
  // either is given (jobMaxRetryCount alone: no window, no escalation).
  // Origin: the restartPolicy key, else the jobMaxRetryCount key.
  std::optional<FileValue<health::RestartPolicySpec>> restart_policy;
  // runPolicy.logMonitoringConfiguration, in the file's order, each rule
  // with its origin; names are unique.
  std::vector<health::LogRuleSpec> log_rules;
  // What the launcher should print at start: HyperPod's keys that elasticrun
  // accepts and ignores, values HyperPod's job spec would refuse, rules that
  // cannot do what they seem to. Each names the file, the line and the key.
  std::vector<std::string> notes;
  // Settings a flag also gives (FlagSpec::config_key, e.g. the monitors
  // section): the YAML scalar as written, by key ("monitors.hangTimeoutInSeconds"),
  // converted as the flag's text would be when the flag is not given.
  std::map<std::string, FileValue<std::string>> flag_settings;
};

// The most a worldSizeOverrides entry's maxMicroBatchSize may say: the SDKs'
// planners list every size of a range (python/elasticrun/overrides.py has
// the same limit).
inline constexpr int kMaxMicroBatchRange = 1 << 20;

// Parses YAML text; `file` names it in messages. An empty document is an
// empty config. Throws ConfigError.
JobConfig parse_job_config(std::string_view yaml, std::string_view file);

// Reads `path` (at most 1 MiB) and parses it. Throws ConfigError when it
// cannot be read, naming the path and the reason.
JobConfig load_job_config(const std::string& path);

}  // namespace elasticrun::cli
