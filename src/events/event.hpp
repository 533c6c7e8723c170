// One line of an agent's event log (--event-log FILE): a JSON object with
// the common fields below and the event's own, flat beside them. Lines are
// made here (format_line) and parsed here (parse_line) and nowhere else;
// docs/events.md lists every event type and its fields (types.hpp names
// them). A reader accepts fields it does not know and versions above its
// own, so that a newer agent may add fields without breaking an older
// elasticctl.
//
//   {"v":1,"seq":7,"time":"2026-12-02T01:02:03.456Z","mono_s":8123.456789,
//    "node":"host-1234-ab12","host":"host","event":"round_start", ...}
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace elasticrun::events {

inline constexpr int kSchemaVersion = 1;

struct Event {
  int version = kSchemaVersion;
  int64_t seq = 0;      // 0, 1, 2, ... in each agent's log
  int64_t wall_ms = 0;  // Unix time in milliseconds ("time" on the line)
  double mono_s = 0;    // CLOCK_MONOTONIC: orders a node's events across clock steps
  std::string node;     // the agent's node id (host-pid-random), unique per agent process
  std::string host;
  std::string type;       // "round_start", ... (types.hpp)
  nlohmann::json fields;  // the type's own fields: an object, possibly empty
};

// The line for `e`, without the newline. Fields named like a common field
// are dropped: the common ones win.
std::string format_line(const Event& e);

// The event on `line`; nullopt and *error (when given) saying why for a line
// that is not a JSON object with the common fields of the right types.
std::optional<Event> parse_line(std::string_view line, std::string* error = nullptr);

// "2026-12-02T01:02:03.456Z" for Unix milliseconds, and back (nullopt for
// any other layout).
std::string format_time(int64_t wall_ms);
std::optional<int64_t> parse_time(std::string_view text);

}  // namespace elasticrun::events
