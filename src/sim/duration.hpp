// Durations as a trace writes them ("90s", "1h30m", "1.5h") and as the
// simulator's table prints them.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace elasticrun::sim {

using Millis = std::chrono::milliseconds;

// One or more <number><unit> terms, units ms, s, m, h, d; the number may have
// a fraction ("1.5h"). The result is rounded to the millisecond. nullopt for
// anything else: a bare number other than "0" (a unit is required, so "30"
// is never read as the wrong one), a sign, or more than 100 years.
std::optional<Millis> parse_duration(std::string_view text);

// For tables: "45s", "25m", "11.6h", "6.5d" (one decimal from minutes up,
// trailing ".0" dropped), "0s" for zero.
std::string short_duration(Millis d);

}  // namespace elasticrun::sim
