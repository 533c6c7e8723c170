#include "cli/yaml_reader.hpp"

#include <charconv>
#include <cmath>
#include <set>
#include <system_error>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

constexpr std::string_view kIntTag = "tag:yaml.org,2002:int";
constexpr std::string_view kFloatTag = "tag:yaml.org,2002:float";
constexpr std::string_view kBoolTag = "tag:yaml.org,2002:bool";

bool plain_number(const YAML::Node& n, bool integer) {
  if (!n.IsScalar()) return false;
  const auto& tag = n.Tag();
  return tag == "?" || tag == kIntTag || (!integer && tag == kFloatTag);
}

}  // namespace

YAML::Node YamlReader::load(std::string_view yaml) const {
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
  return docs.empty() ? YAML::Node(YAML::NodeType::Null) : docs[0];
}

std::string YamlReader::where(const YAML::Node& node, const YAML::Node& fallback) const {
  const bool own = !node.IsNull() && !node.Mark().is_null();
  const auto mark = own ? node.Mark() : fallback.Mark();
  if (mark.is_null()) return file_;
  return file_ + ", line " + std::to_string(mark.line + 1);
}

std::string YamlReader::origin(const YAML::Node& k, const std::string& path) const {
  return where(k, YAML::Node()) + ": " + path;
}

void YamlReader::fail(const YAML::Node& at, const YAML::Node& fallback, const std::string& path,
                      const std::string& why) const {
  throw ConfigError(where(at, fallback) + ": " + path + ": " + why);
}

std::string YamlReader::describe(const YAML::Node& n) {
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

void YamlReader::for_each_key(const YAML::Node& map, const YAML::Node& map_key,
                              const std::string& path,
                              std::initializer_list<std::string_view> known,
                              const KeyFn& fn) const {
  for_each_key(map, map_key, path, std::span<const std::string_view>(known.begin(), known.size()),
               fn);
}

void YamlReader::for_each_key(const YAML::Node& map, const YAML::Node& map_key,
                              const std::string& path, std::span<const std::string_view> known,
                              const KeyFn& fn) const {
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

int YamlReader::integer(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
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

int YamlReader::at_least(const YAML::Node& k, const YAML::Node& v, const std::string& path,
                         int min) const {
  const int n = integer(k, v, path);
  if (n < min) {
    fail(v, k, path, min == 0 ? "must not be negative" : "must be at least " + std::to_string(min));
  }
  return n;
}

double YamlReader::number(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
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

std::vector<int> YamlReader::integers(const YAML::Node& k, const YAML::Node& v,
                                      const std::string& path) const {
  if (!v.IsSequence()) fail(v, k, path, "expected a list of integers, got " + describe(v));
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(integer(k, v[i], path + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::string YamlReader::text(const YAML::Node& k, const YAML::Node& v,
                             const std::string& path) const {
  if (!v.IsScalar()) fail(v, k, path, "expected a string, got " + describe(v));
  return v.Scalar();
}

bool YamlReader::boolean(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
  if (v.IsScalar() && (v.Tag() == "?" || v.Tag() == kBoolTag)) {
    const std::string& s = v.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  fail(v, k, path, "expected true or false, got " + describe(v));
}

}  // namespace elasticrun::cli
