#include "cli/job_config.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include "cli/flags.hpp"
#include "cli/run_policy.hpp"
#include "cli/yaml_reader.hpp"
#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

void read_elastic_policy(const YamlReader& r, const YAML::Node& section_key,
                         const YAML::Node& section, JobConfig& c) {
  const auto set_int = [&](std::optional<FileValue<int>>& slot, const YAML::Node& k,
                           const YAML::Node& v, const std::string& path) {
    slot = FileValue<int>{r.integer(k, v, path), r.origin(k, path)};
  };
  const auto set_seconds = [&](std::optional<FileValue<double>>& slot, const YAML::Node& k,
                               const YAML::Node& v, const std::string& path) {
    slot = FileValue<double>{r.number(k, v, path), r.origin(k, path)};
  };
  r.for_each_key(
      section, section_key, "elasticPolicy",
      {"minReplicas", "maxReplicas", "replicaIncrementStep", "replicaDiscreteValues",
       "gracefulShutdownTimeoutInSeconds", "scalingTimeoutInSeconds",
       "faultyScaleDownTimeoutInSeconds", "minStablePeriodInSeconds", "maxStablePeriodInSeconds"},
      [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
        const std::string path = "elasticPolicy." + key;
        if (key == "minReplicas") {
          set_int(c.min_replicas, k, v, path);
        } else if (key == "maxReplicas") {
          set_int(c.max_replicas, k, v, path);
        } else if (key == "replicaIncrementStep") {
          set_int(c.replica_increment_step, k, v, path);
        } else if (key == "replicaDiscreteValues") {
          c.replica_discrete_values = {r.integers(k, v, path), r.origin(k, path)};
        } else if (key == "gracefulShutdownTimeoutInSeconds") {
          set_seconds(c.graceful_shutdown_timeout, k, v, path);
        } else if (key == "scalingTimeoutInSeconds") {
          set_seconds(c.scaling_timeout, k, v, path);
        } else if (key == "faultyScaleDownTimeoutInSeconds") {
          set_seconds(c.faulty_scale_down_timeout, k, v, path);
        } else if (key == "minStablePeriodInSeconds") {
          set_seconds(c.min_stable_period, k, v, path);
        } else {
          set_seconds(c.max_stable_period, k, v, path);
        }
      });
}

// Why the micro-batch key `name`, just added to `given`, does not go with
// the keys given before it; empty when it does. An entry says one size or a
// range, and a range's sizes are listed by the SDKs' planners, so its top is
// capped. The Python SDK's reader refuses the same, at the same key.
std::string micro_batch_conflict(const std::map<std::string, int>& given, const std::string& name) {
  const int value = given.at(name);
  if (name == "maxMicroBatchSize" && value > kMaxMicroBatchRange) {
    return "must be at most " + std::to_string(kMaxMicroBatchRange);
  }
  const bool range = given.contains("minMicroBatchSize") || given.contains("maxMicroBatchSize");
  if (name == "microBatchSize" && range) {
    return "one size, or a range (minMicroBatchSize, maxMicroBatchSize), not both";
  }
  if (name != "microBatchSize" && given.contains("microBatchSize")) {
    return "a range, or one size (microBatchSize), not both";
  }
  const auto low = given.find("minMicroBatchSize");
  const auto high = given.find("maxMicroBatchSize");
  if (low != given.end() && high != given.end() && low->second > high->second) {
    return "the range's minimum " + std::to_string(low->second) + " is above its maximum " +
           std::to_string(high->second);
  }
  return "";
}

void read_world_size_overrides(const YamlReader& r, const YAML::Node& section_key,
                               const YAML::Node& section, JobConfig& c) {
  // Keyed by data (world sizes), so any key is welcome here; integer() checks it.
  r.for_each_key(
      section, section_key, "worldSizeOverrides", {},
      [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
        const std::string path = "worldSizeOverrides." + key;
        const int size = r.integer(
            k, k, "worldSizeOverrides key " + util::quote(key) + " (a world size in nodes)");
        if (size < 1) r.fail(k, k, path, "a world size must be at least 1 node");
        // "8" and "08" are different keys to YAML but one world size.
        if (c.world_size_origins.contains(size)) {
          r.fail(k, k, path, "world size " + std::to_string(size) + " is given twice");
        }
        c.world_size_origins[size] = r.origin(k, path);
        auto& entry = c.world_size_overrides[size];
        if (v.IsNull()) r.fail(v, k, path, "expected a mapping (learningRate, microBatchSize)");
        std::map<std::string, int> micro;  // the micro-batch keys given so far
        r.for_each_key(v, k, path,
                       {"learningRate", "microBatchSize", "minMicroBatchSize", "maxMicroBatchSize"},
                       [&](const std::string& name, const YAML::Node& nk, const YAML::Node& nv) {
                         const std::string item = path + "." + name;
                         if (name == "learningRate") {
                           if (r.number(nk, nv, item) < 0) {
                             r.fail(nv, nk, item, "must not be negative");
                           }
                         } else {
                           micro[name] = r.at_least(nk, nv, item, 1);
                           if (const std::string why = micro_batch_conflict(micro, name);
                               !why.empty()) {
                             r.fail(nv, nk, item, why);
                           }
                         }
                         entry[name] = nv.Scalar();
                       });
        if (micro.contains("minMicroBatchSize") && !micro.contains("maxMicroBatchSize")) {
          r.fail(k, k, path + ".minMicroBatchSize", "a range needs maxMicroBatchSize");
        }
      });
}

// A section whose keys are flags' config keys (FlagSpec::config_key): each
// value is a scalar, kept as written for the flag's converter.
void read_flag_section(const YamlReader& r, const std::string& section, const YAML::Node& k,
                       const YAML::Node& v, JobConfig& c) {
  std::vector<std::string> names;
  for (const auto& f : flag_table()) {
    if (f.config_key.starts_with(section + ".")) {
      names.emplace_back(f.config_key.substr(section.size() + 1));
    }
  }
  const std::vector<std::string_view> known(names.begin(), names.end());
  r.for_each_key(v, k, section, std::span<const std::string_view>(known),
                 [&](const std::string& key, const YAML::Node& nk, const YAML::Node& nv) {
                   const std::string path = section + "." + key;
                   if (!nv.IsScalar()) {
                     r.fail(nv, nk, path,
                            "expected a single value, got " + YamlReader::describe(nv));
                   }
                   c.flag_settings[path] = FileValue<std::string>{nv.Scalar(), r.origin(nk, path)};
                 });
}

}  // namespace

JobConfig parse_job_config(std::string_view yaml, std::string_view file) {
  const YamlReader r(file);
  const YAML::Node doc = r.load(yaml);
  JobConfig c;
  r.for_each_key(doc, YAML::Node(), "",
                 {"elasticPolicy", "runPolicy", "worldSizeOverrides", "monitors"},
                 [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                   if (key == "elasticPolicy") {
                     read_elastic_policy(r, k, v, c);
                   } else if (key == "runPolicy") {
                     read_run_policy(r, k, v, c);
                   } else if (key == "monitors") {
                     read_flag_section(r, key, k, v, c);
                   } else {
                     read_world_size_overrides(r, k, v, c);
                   }
                 });
  return c;
}

JobConfig load_job_config(const std::string& path) {
  const std::string what = "--config " + util::quote(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(what + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buffer[8192];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    // A config is a few lines; a path to a checkpoint by mistake must not be read whole.
    if (text.size() > kMaxFileBytes) throw ConfigError(what + ": larger than 1 MiB");
  }
  if (in.bad()) throw ConfigError(what + ": cannot read: " + std::strerror(errno));
  return parse_job_config(text, path);
}

}  // namespace elasticrun::cli
