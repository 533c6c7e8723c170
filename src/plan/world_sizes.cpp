#include "plan/world_sizes.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "elasticrun/errors.hpp"

namespace elasticrun::plan {
namespace {

constexpr size_t kMaxSizes = 4096;

int64_t number(std::string_view text, const std::string& whole) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 1) {
    throw ConfigError("--world-sizes '" + whole + "': '" + std::string(text) +
                      "' is not a whole number of at least 1");
  }
  return value;
}

void add_item(std::string_view item, const std::string& whole, std::vector<int64_t>& out) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t colon = item.find(':', start);
    parts.push_back(item.substr(start, colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) {
    throw ConfigError("--world-sizes '" + whole + "': '" + std::string(item) +
                      "' is not N, MIN:MAX or MIN:MAX:STEP");
  }
  const int64_t low = number(parts[0], whole);
  const int64_t high = parts.size() > 1 ? number(parts[1], whole) : low;
  const int64_t step = parts.size() > 2 ? number(parts[2], whole) : 1;
  if (high < low) {
    throw ConfigError("--world-sizes '" + whole + "': '" + std::string(item) +
                      "' ends below its start");
  }
  for (int64_t n = low;; n += step) {
    if (out.size() >= kMaxSizes) {
      throw ConfigError("--world-sizes '" + whole + "': more than " + std::to_string(kMaxSizes) +
                        " sizes");
    }
    out.push_back(n);
    if (high - n < step) break;  // not n + step > high, which could overflow
  }
}

}  // namespace

std::vector<int64_t> parse_world_sizes(const std::string& text) {
  std::vector<int64_t> out;
  const std::string_view all(text);
  for (size_t start = 0;;) {
    const size_t comma = all.find(',', start);
    add_item(all.substr(start, comma - start), text, out);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace elasticrun::plan
