// The elastic policy as the command line and the job config file (--config)
// give it: which world sizes a job may run at, and how fast it may change.
//
// Plain data on purpose: src/cli must not depend on src/elastic, so the
// launcher maps these fields onto elastic::PolicyConfig (seconds to Millis)
// and the agent's timeouts. The values here are already validated (see
// parse_elastic in cli/elastic_parse.hpp): min_replicas >= 1, max >= min,
// step >= 1, discrete values sorted, unique and within [min, max], every
// duration >= 0, min_stable_period <= max_stable_period.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::cli {

// worldSizeOverrides of the job config: world size (nodes) -> key -> the
// YAML scalar exactly as written ("learningRate" -> "3e-4",
// "microBatchSize" -> "16"). Keys and value types are checked; the values
// are kept as text so the worker SDK reads what the user wrote, unrounded.
using WorldSizeOverrides = std::map<int, std::map<std::string, std::string>>;

struct ElasticOptions {
  // Replicas are nodes. LaunchConfig::nnodes_min/nnodes_max always equal these.
  int min_replicas = 1;
  int max_replicas = 1;
  // Allowed sizes min + k*step up to max; not used when discrete values are set.
  int replica_increment_step = 1;
  // Allowed sizes exactly, sorted and unique; empty: use the step.
  std::vector<int> replica_discrete_values;

  // Seconds. Time workers get to checkpoint and exit after a scale event
  // before they are killed.
  double graceful_shutdown_timeout = 60;
  // Seconds of stable extra capacity before a scale-up.
  double scaling_timeout = 10;
  // Seconds to wait for a failed node's replacement before shrinking.
  double faulty_scale_down_timeout = 30;
  // Seconds between voluntary scale events: the period starts at the min and
  // backs off up to the max when events come often (anti-thrashing).
  double min_stable_period = 30;
  double max_stable_period = 600;

  // --config, made absolute so workers in another directory find it too (the
  // agent exports it to them as ELASTICRUN_CONFIG_FILE).
  std::optional<std::string> config_file;
  WorldSizeOverrides world_size_overrides;
};

}  // namespace elasticrun::cli
