#include "events/event.hpp"

#include <cstdio>
#include <ctime>

namespace elasticrun::events {
namespace {

constexpr const char* kCommon[] = {"v", "seq", "time", "mono_s", "node", "host", "event"};

bool is_common(const std::string& key) {
  for (const char* k : kCommon) {
    if (key == k) return true;
  }
  return false;
}

}  // namespace

std::string format_time(int64_t wall_ms) {
  const time_t secs = static_cast<time_t>(wall_ms / 1000);
  const int ms = static_cast<int>(wall_ms % 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::optional<int64_t> parse_time(std::string_view text) {
  if (text.size() != 24) return std::nullopt;
  const std::string s(text);
  struct tm tm {};
  int ms = 0, consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &consumed) != 7 ||
      consumed != 24) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t secs = timegm(&tm);
  if (secs == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<int64_t>(secs) * 1000 + ms;
}

std::string format_line(const Event& e) {
  // Common fields first, in a fixed order, so that a person reading the file
  // (or grep) finds them where they expect.
  nlohmann::ordered_json j;
  j["v"] = e.version;
  j["seq"] = e.seq;
  j["time"] = format_time(e.wall_ms);
  j["mono_s"] = e.mono_s;
  j["node"] = e.node;
  j["host"] = e.host;
  j["event"] = e.type;
  if (e.fields.is_object()) {
    for (const auto& [k, v] : e.fields.items()) {
      if (!is_common(k)) j[k] = v;
    }
  }
  // Invalid UTF-8 in a reason (a worker's output) is replaced, never thrown.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<Event> parse_line(std::string_view line, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<Event> {
    if (error) *error = why;
    return std::nullopt;
  };
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("not JSON");
  if (!j.is_object()) return fail("not a JSON object");
  Event e;
  auto get_int = [&](const char* key, int64_t& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return false;
    out = it->get<int64_t>();
    return true;
  };
  auto get_string = [&](const char* key, std::string& out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  int64_t version = 0;
  if (!get_int("v", version) || version < 1) return fail("no schema version \"v\" (an integer)");
  e.version = static_cast<int>(version);
  if (!get_int("seq", e.seq)) return fail("no \"seq\" (an integer)");
  std::string time;
  if (!get_string("time", time)) return fail("no \"time\" (a string)");
  const auto wall = parse_time(time);
  if (!wall) return fail("\"time\" is not YYYY-MM-DDTHH:MM:SS.mmmZ: " + time);
  e.wall_ms = *wall;
  auto mono = j.find("mono_s");
  if (mono == j.end() || !mono->is_number()) return fail("no \"mono_s\" (a number)");
  e.mono_s = mono->get<double>();
  if (!get_string("node", e.node)) return fail("no \"node\" (a string)");
  get_string("host", e.host);  // optional: a reader can do without it
  if (!get_string("event", e.type) || e.type.empty()) return fail("no \"event\" (a string)");
  e.fields = nlohmann::json::object();
  for (auto& [k, v] : j.items()) {
    if (!is_common(k)) e.fields[k] = std::move(v);
  }
  return e;
}

}  // namespace elasticrun::events
