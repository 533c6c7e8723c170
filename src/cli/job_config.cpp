#include "cli/job_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <set>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

constexpr std::string_view kIntTag = "tag:yaml.org,2002:int";
constexpr std::string_view kFloatTag = "tag:yaml.org,2002:float";

class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

  JobConfig read(std::string_view yaml) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(std::string(yaml));
    } catch (const YAML::Exception& e) {
      // yaml-cpp's own what() repeats the position in its words; ours is enough.
      throw ConfigError(file_ + ", line " + std::to_string(e.mark.line + 1) +
                        ": not valid YAML: " + e.msg);
    }
    if (docs.size() > 1) {
      throw ConfigError(file_ + ": holds " + std::to_string(docs.size()) +
                        " YAML documents; a job config is one");
    }
    if (docs.empty() || docs[0].IsNull()) return std::move(config_);
    for_each_key(docs[0], YAML::Node(), "", {"elasticPolicy", "worldSizeOverrides"},
                 [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                   if (key == "elasticPolicy") {
                     elastic_policy(k, v);
                   } else {
                     world_size_overrides(k, v);
                   }
                 });
    return std::move(config_);
  }

 private:
  using KeyFn =
      std::function<void(const std::string&, const YAML::Node& key, const YAML::Node& value)>;

  // A null node (an empty value) has no position of its own (yaml-cpp gives
  // it the next token's, often on the next line): report the key's.
  std::string where(const YAML::Node& node, const YAML::Node& fallback) const {
    const bool own = !node.IsNull() && !node.Mark().is_null();
    const auto mark = own ? node.Mark() : fallback.Mark();
    if (mark.is_null()) return file_;
    return file_ + ", line " + std::to_string(mark.line + 1);
  }

  [[noreturn]] void fail(const YAML::Node& at, const YAML::Node& fallback, const std::string& path,
                         const std::string& why) const {
    throw ConfigError(where(at, fallback) + ": " + path + ": " + why);
  }

  static std::string describe(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Null:
        return "nothing";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Map:
        return "a mapping";
      default:
        break;
    }
    if (n.Tag() == "!") return "the string " + util::quote(n.Scalar());
    return util::quote(n.Scalar());
  }

  // A number is a plain scalar (or one tagged !!int / !!float): "2" in quotes
  // is a string in YAML, and Kubernetes would refuse it too.
  static bool plain_number(const YAML::Node& n, bool integer) {
    if (!n.IsScalar()) return false;
    const auto& tag = n.Tag();
    return tag == "?" || tag == kIntTag || (!integer && tag == kFloatTag);
  }

  // Visits each entry of the mapping `map` (path: its dotted name, "" at the
  // top). Rejects keys that are not in `known` (unless known is empty, for
  // maps keyed by data) and keys given twice; yaml-cpp keeps both silently.
  void for_each_key(const YAML::Node& map, const YAML::Node& map_key, const std::string& path,
                    std::initializer_list<std::string_view> known, const KeyFn& fn) {
    if (map.IsNull()) return;  // "elasticPolicy:" with nothing under it
    const std::string name = path.empty() ? "the top level" : path;
    if (!map.IsMap()) fail(map, map_key, name, "expected a mapping, got " + describe(map));
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const YAML::Node& k = entry.first;
      const YAML::Node& v = entry.second;
      if (!k.IsScalar()) fail(k, map_key, name, "a key must be a plain word, got " + describe(k));
      const std::string key = k.Scalar();
      const std::string full = path.empty() ? key : path + "." + key;
      if (known.size() != 0) {
        bool ok = false;
        std::string list;
        for (auto candidate : known) {
          ok = ok || candidate == key;
          list += (list.empty() ? "" : ", ") + std::string(candidate);
        }
        if (!ok) {
          throw ConfigError(where(k, map_key) + ": unknown key " + util::quote(key) + " " +
                            (path.empty() ? "at the top level" : "in " + path) +
                            "; expected one of " + list);
        }
      }
      if (!seen.insert(key).second) {
        throw ConfigError(where(k, map_key) + ": " + full + " is given twice");
      }
      fn(key, k, v);
    }
  }

  int integer(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
    std::string_view text = plain_number(v, true) ? std::string_view(v.Scalar()) : "";
    if (text.starts_with('+')) text.remove_prefix(1);
    int value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size()) {
      fail(v, k, path, "expected an integer, got " + describe(v));
    }
    if (ec == std::errc::result_out_of_range) fail(v, k, path, "integer out of range");
    return value;
  }

  // Python's float() for finite values, as on the command line (parse_double).
  double number(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
    std::string_view text = plain_number(v, false) ? std::string_view(v.Scalar()) : "";
    bool negative = false;
    if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
      negative = text[0] == '-';
      text.remove_prefix(1);
    }
    double value = 0;
    // from_chars would take "inf", "nan" and hex; none of them is a sensible setting.
    const bool plain =
        !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.');
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!plain || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
      fail(v, k, path, "expected a number, got " + describe(v));
    }
    return negative ? -value : value;
  }

  std::vector<int> integers(const YAML::Node& k, const YAML::Node& v, const std::string& path) {
    if (!v.IsSequence()) fail(v, k, path, "expected a list of integers, got " + describe(v));
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i) {
      out.push_back(integer(k, v[i], path + "[" + std::to_string(i) + "]"));
    }
    return out;
  }

  std::string origin(const YAML::Node& k, const std::string& path) const {
    return where(k, YAML::Node()) + ": " + path;
  }

  void elastic_policy(const YAML::Node& section_key, const YAML::Node& section) {
    const auto set_int = [&](std::optional<FileValue<int>>& slot, const YAML::Node& k,
                             const YAML::Node& v, const std::string& path) {
      slot = FileValue<int>{integer(k, v, path), origin(k, path)};
    };
    const auto set_seconds = [&](std::optional<FileValue<double>>& slot, const YAML::Node& k,
                                 const YAML::Node& v, const std::string& path) {
      slot = FileValue<double>{number(k, v, path), origin(k, path)};
    };
    auto& c = config_;
    for_each_key(
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
            c.replica_discrete_values = {integers(k, v, path), origin(k, path)};
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

  void world_size_overrides(const YAML::Node& section_key, const YAML::Node& section) {
    // Keyed by data (world sizes), so any key is welcome here; integer() checks it.
    for_each_key(
        section, section_key, "worldSizeOverrides", {},
        [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
          const std::string path = "worldSizeOverrides." + key;
          const int size = integer(
              k, k, "worldSizeOverrides key " + util::quote(key) + " (a world size in nodes)");
          if (size < 1) fail(k, k, path, "a world size must be at least 1 node");
          // "8" and "08" are different keys to YAML but one world size.
          if (config_.world_size_origins.contains(size)) {
            fail(k, k, path, "world size " + std::to_string(size) + " is given twice");
          }
          config_.world_size_origins[size] = origin(k, path);
          auto& entry = config_.world_size_overrides[size];
          if (v.IsNull()) fail(v, k, path, "expected a mapping (learningRate, microBatchSize)");
          for_each_key(v, k, path, {"learningRate", "microBatchSize"},
                       [&](const std::string& name, const YAML::Node& nk, const YAML::Node& nv) {
                         const std::string item = path + "." + name;
                         if (name == "learningRate") {
                           if (number(nk, nv, item) < 0) fail(nv, nk, item, "must not be negative");
                         } else if (integer(nk, nv, item) < 1) {
                           fail(nv, nk, item, "must be at least 1");
                         }
                         entry[name] = nv.Scalar();
                       });
        });
  }

  std::string file_;
  JobConfig config_;
};

}  // namespace

JobConfig parse_job_config(std::string_view yaml, std::string_view file) {
  return Reader(file).read(yaml);
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
