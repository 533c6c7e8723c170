// Small string helpers for messages.
#pragma once

#include <string>
#include <string_view>

namespace elasticrun::util {

// Quotes a key or value for a log line or error message: non-printable bytes
// become \xNN and anything past max bytes is elided, so a hostile 8 KiB
// binary key cannot flood a log.
std::string quote(std::string_view s, size_t max = 80);

}  // namespace elasticrun::util
