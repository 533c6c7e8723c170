#include "util/cpu_list.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "util/strings.hpp"

namespace elasticrun::util {
namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// A decimal CPU number below kMaxCpu, the whole of s; -1 otherwise.
int cpu_number(std::string_view s) {
  s = trim(s);
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0 || v >= kMaxCpu) {
    return -1;
  }
  return v;
}

}  // namespace

Result<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  text = trim(text);
  if (text.empty()) return cpus;
  // A bitmap rather than appending: overlapping ranges cost nothing more.
  std::vector<bool> in(kMaxCpu, false);
  int highest = -1;
  for (size_t start = 0;;) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view entry = text.substr(start, comma - start);
    const size_t dash = entry.find('-');
    const int first = cpu_number(entry.substr(0, dash));
    const int last = dash == std::string_view::npos ? first : cpu_number(entry.substr(dash + 1));
    if (first < 0 || last < first) {
      return Status(EINVAL, "CPU list " + quote(text) + ": bad entry " + quote(entry));
    }
    for (int cpu = first; cpu <= last; ++cpu) in[static_cast<size_t>(cpu)] = true;
    highest = std::max(highest, last);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  for (int cpu = 0; cpu <= highest; ++cpu) {
    if (in[static_cast<size_t>(cpu)]) cpus.push_back(cpu);
  }
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace elasticrun::util
