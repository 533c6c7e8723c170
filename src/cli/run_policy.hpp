// The job config's runPolicy section: HyperPod's restart limits
// (jobMaxRetryCount, restartPolicy) and log monitoring rules
// (logMonitoringConfiguration) into JobConfig, with HyperPod's other
// runPolicy keys, which are its operator's, accepted and noted as ignored so
// one job spec serves both tools. docs/job-config.md has the keys.
#pragma once

#include <yaml-cpp/yaml.h>

#include "cli/job_config.hpp"
#include "cli/yaml_reader.hpp"

namespace elasticrun::cli {

// Reads `section` (the value of the top-level key `section_key`) into
// c.restart_policy, c.log_rules and c.notes. Throws ConfigError naming the
// file, the line and the key: an unknown key, a value of the wrong type or
// out of range, a restartPolicy without evalPeriodSeconds, a rule without a
// name or logPattern, two rules of one name, an operator other than gt,
// gteq, lt, lteq and eq, metricThreshold or operator without the other.
// Patterns are not compiled here (health::LogRules::compile does).
void read_run_policy(const YamlReader& r, const YAML::Node& section_key, const YAML::Node& section,
                     JobConfig& c);

}  // namespace elasticrun::cli
