#include "cli/flag_text.hpp"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>

#include "cli/launch_config.hpp"
#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

void fail_flag(const Raw& raw, std::string_view why) {
  throw ConfigError(raw.origin + " " + util::quote(raw.text) + ": " + std::string(why));
}

bool parse_switch(const Raw& raw) {
  return parse_int(raw.origin, raw.text) != 0;
}

int parse_count(const Raw& raw) {
  const int n = parse_int(raw.origin, raw.text);
  if (n < 0) fail_flag(raw, "must not be negative");
  return n;
}

int parse_port(const Raw& raw) {
  const int port = parse_int(raw.origin, raw.text);
  if (port < 0 || port > 65535) fail_flag(raw, "a port must be between 0 and 65535");
  return port;
}

double parse_seconds(const Raw& raw) {
  const double v = parse_double(raw.origin, raw.text);
  if (v < 0) fail_flag(raw, "must not be negative");
  return v;
}

std::optional<uint64_t> parse_bytes(const Raw& raw) {
  if (raw.text == "auto") return std::nullopt;
  std::string_view digits = raw.text;
  unsigned shift = 0;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      case 'T':
      case 't':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift) digits.remove_suffix(1);
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    fail_flag(raw, "not a size (bytes, with an optional K, M, G or T) or auto");
  }
  if (shift && v > (UINT64_MAX >> shift)) fail_flag(raw, "too large");
  return v << shift;
}

void check_choice(const Raw& raw, std::initializer_list<std::string_view> choices) {
  std::string list;
  for (auto c : choices) {
    if (raw.text == c) return;
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  fail_flag(raw, "expected one of " + list);
}

bool valid_module_name(std::string_view name) {
  bool start = true;
  for (char ch : name) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(ch)) || ch == '_';
    const bool digit = std::isdigit(static_cast<unsigned char>(ch));
    if (ch == '.') {
      if (start) return false;
      start = true;
    } else if (alpha || (digit && !start)) {
      start = false;
    } else {
      return false;
    }
  }
  return !start;
}

}  // namespace elasticrun::cli
