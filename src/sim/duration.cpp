#include "sim/duration.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace elasticrun::sim {
namespace {

constexpr double kMaxMs = 100.0 * 365 * 24 * 3600 * 1000;

std::optional<double> unit_ms(std::string_view unit) {
  if (unit == "ms") return 1.0;
  if (unit == "s") return 1e3;
  if (unit == "m") return 60e3;
  if (unit == "h") return 3600e3;
  if (unit == "d") return 86400e3;
  return std::nullopt;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_letter(char c) {
  return c >= 'a' && c <= 'z';
}

}  // namespace

std::optional<Millis> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text == "0") return Millis(0);
  double total = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t number_start = i;
    while (i < text.size() && is_digit(text[i])) ++i;
    const size_t whole_digits = i - number_start;
    size_t fraction_digits = 0;
    if (i < text.size() && text[i] == '.') {
      ++i;
      const size_t fraction_start = i;
      while (i < text.size() && is_digit(text[i])) ++i;
      fraction_digits = i - fraction_start;
    }
    if (whole_digits == 0 && fraction_digits == 0) return std::nullopt;
    // At most 15 significant digits: a double holds them exactly.
    if (whole_digits + fraction_digits > 15) return std::nullopt;
    double number = 0;
    // from_chars: no locale, so "1.5" means the same everywhere.
    std::from_chars(text.data() + number_start, text.data() + i, number);
    const size_t unit_start = i;
    while (i < text.size() && is_letter(text[i])) ++i;
    const auto scale = unit_ms(text.substr(unit_start, i - unit_start));
    if (!scale) return std::nullopt;
    total += number * *scale;
    if (total > kMaxMs) return std::nullopt;
  }
  return Millis(static_cast<int64_t>(std::llround(total)));
}

std::string short_duration(Millis d) {
  const double ms = static_cast<double>(d.count());
  char buf[32];
  auto one_decimal = [&](double value, const char* unit) {
    std::snprintf(buf, sizeof buf, "%.1f", value);
    std::string s = buf;
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s + unit;
  };
  if (d.count() == 0) return "0s";
  if (ms < 1e3) return std::to_string(d.count()) + "ms";
  if (ms < 60e3) return one_decimal(ms / 1e3, "s");
  if (ms < 3600e3) return one_decimal(ms / 60e3, "m");
  if (ms < 4 * 86400e3) return one_decimal(ms / 3600e3, "h");
  return one_decimal(ms / 86400e3, "d");
}

}  // namespace elasticrun::sim
