#include "cli/slurm_hostlist.hpp"

#include <algorithm>
#include <charconv>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {
namespace {

std::string too_many(const std::string& what, size_t limit) {
  return what + ": more than " + std::to_string(limit) + " hosts";
}

// One bracket's numbers, as text with their padding: "01-03,07" gives
// 01 02 03 07.
std::vector<std::string> expand_ranges(std::string_view body, const std::string& what,
                                       size_t limit) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= body.size();) {
    const size_t comma = std::min(body.find(',', start), body.size());
    const std::string part(body.substr(start, comma - start));
    start = comma + 1;
    const auto dash = part.find('-');
    const std::string lo = part.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    const auto number = [&](const std::string& s) {
      unsigned long v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
        throw ConfigError(what + ": " + util::quote(part) + " is not a number or a range");
      }
      return v;
    };
    const unsigned long a = number(lo);
    const unsigned long b = number(hi);
    if (b < a) throw ConfigError(what + ": the range " + util::quote(part) + " runs backwards");
    for (unsigned long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(std::move(digits));
      if (out.size() > limit) throw ConfigError(too_many(what, limit));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list, std::string_view origin,
                                         size_t limit) {
  const std::string what = std::string(origin) + " " + util::quote(std::string(list));
  std::vector<std::string> hosts;
  size_t i = 0;
  while (i < list.size()) {
    // One item: up to a comma outside brackets.
    std::vector<std::string> names{""};
    for (; i < list.size() && list[i] != ','; ++i) {
      if (list[i] == ']') throw ConfigError(what + ": a ']' without its '['");
      if (list[i] != '[') {
        for (auto& n : names) n += list[i];
        continue;
      }
      const auto close = list.find(']', i);
      if (close == std::string_view::npos) throw ConfigError(what + ": a '[' without its ']'");
      const auto numbers = expand_ranges(list.substr(i + 1, close - i - 1), what, limit);
      std::vector<std::string> grown;
      for (const auto& n : names) {
        for (const auto& d : numbers) grown.push_back(n + d);
        if (grown.size() > limit) throw ConfigError(too_many(what, limit));
      }
      names = std::move(grown);
      i = close;
    }
    if (names.front().empty()) throw ConfigError(what + ": an empty host name");
    hosts.insert(hosts.end(), names.begin(), names.end());
    if (hosts.size() > limit) throw ConfigError(too_many(what, limit));
    if (i < list.size()) {
      ++i;  // the comma
      if (i == list.size()) throw ConfigError(what + ": an empty host name");
    }
  }
  if (hosts.empty()) throw ConfigError(what + ": no hosts");
  return hosts;
}

}  // namespace elasticrun::cli
