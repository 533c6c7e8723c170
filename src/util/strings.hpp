// Small string helpers for messages.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace elasticrun::util {

// Quotes a key or value for a log line or error message: non-printable bytes
// become \xNN and anything past max bytes is elided, so a hostile 8 KiB
// binary key cannot flood a log.
std::string quote(std::string_view s, size_t max = 80);

// A duration for a message: "60 s", "0.3 s" (milliseconds kept, trailing zeros dropped).
std::string seconds_text(std::chrono::milliseconds d);

}  // namespace elasticrun::util
