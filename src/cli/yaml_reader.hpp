// Strict, typed reading of the job config's YAML (cli/job_config.hpp): each
// value checked for its type, each problem a ConfigError naming the file,
// the line and the dotted key ("job.yaml, line 4: elasticPolicy.maxReplicas:
// expected an integer, got 'four'"). Private to src/cli; the sections'
// readers (job_config.cpp, run_policy.cpp) build on it.
//
// In the calls below `k` is a value's key node and `v` the value; `path` is
// the value's dotted name for messages ("runPolicy.restartPolicy").
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace elasticrun::cli {

class YamlReader {
 public:
  using KeyFn =
      std::function<void(const std::string&, const YAML::Node& key, const YAML::Node& value)>;

  // `file` names the text in every message.
  explicit YamlReader(std::string_view file) : file_(file) {}

  // The one document of `yaml` (a null node for an empty text). Throws
  // ConfigError for text that is not YAML or holds several documents.
  YAML::Node load(std::string_view yaml) const;

  // "file, line N" of `node`; of `fallback` when node has no position of its
  // own (yaml-cpp gives a null value the next token's, often the next line's).
  std::string where(const YAML::Node& node, const YAML::Node& fallback) const;
  // "file, line N: path" of the key `k`: a value's origin (cli::FileValue).
  std::string origin(const YAML::Node& k, const std::string& path) const;
  // Throws ConfigError "<where(at, fallback)>: <path>: <why>".
  [[noreturn]] void fail(const YAML::Node& at, const YAML::Node& fallback, const std::string& path,
                         const std::string& why) const;
  // A node for a message: "nothing", "a list", "a mapping", "'four'", or
  // "the string '2'" for a quoted scalar.
  static std::string describe(const YAML::Node& n);

  // Visits each entry of the mapping `map` whose key is `map_key` (path: the
  // map's dotted name, "" at the top); nothing for a null map ("section:"
  // with nothing under it). Refuses a map that is not one, keys that are
  // not in `known` (unless known is empty, for maps keyed by data), and keys
  // given twice, which yaml-cpp would keep silently.
  void for_each_key(const YAML::Node& map, const YAML::Node& map_key, const std::string& path,
                    std::initializer_list<std::string_view> known, const KeyFn& fn) const;
  void for_each_key(const YAML::Node& map, const YAML::Node& map_key, const std::string& path,
                    std::span<const std::string_view> known, const KeyFn& fn) const;

  // A number is a plain scalar (or one tagged !!int / !!float): "2" in
  // quotes is a string in YAML, and Kubernetes would refuse it too.
  int integer(const YAML::Node& k, const YAML::Node& v, const std::string& path) const;
  // integer(), and at least `min` ("must not be negative" for 0).
  int at_least(const YAML::Node& k, const YAML::Node& v, const std::string& path, int min) const;
  // Python's float() for finite values, as on the command line (parse_double);
  // .inf and .nan are refused.
  double number(const YAML::Node& k, const YAML::Node& v, const std::string& path) const;
  std::vector<int> integers(const YAML::Node& k, const YAML::Node& v,
                            const std::string& path) const;
  // Any scalar, as written: YAML has no other way to say "text" (All, "All", .*foo.*).
  std::string text(const YAML::Node& k, const YAML::Node& v, const std::string& path) const;
  // YAML 1.2's true/false (True, TRUE, ...); "true" in quotes is a string.
  bool boolean(const YAML::Node& k, const YAML::Node& v, const std::string& path) const;

 private:
  std::string file_;
};

}  // namespace elasticrun::cli
