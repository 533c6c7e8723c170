// The event log (src/events): the line format made and parsed in one place,
// a reader that takes what a newer agent adds, the writer's order across
// threads, and docs/events.md naming every type the agent records.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/errors.hpp"
#include "events/event.hpp"
#include "events/event_log.hpp"
#include "events/types.hpp"
#include "temp_dir.hpp"

using namespace elasticrun::events;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("an event's line parses back to the same event", "[events]") {
  Event e;
  e.seq = 12;
  e.wall_ms = 1'796'162'400'123;
  e.mono_s = 8123.25;
  e.node = "host-1-ab";
  e.host = "host";
  e.type = "round_start";
  e.fields = {{"round", 3}, {"reason", "a worker failed"}, {"steps", {1, 2}}};
  const std::string line = format_line(e);
  CHECK(line.rfind(R"({"v":1,"seq":12,"time":"2026-12-01T22:00:00.123Z",)", 0) == 0);
  CHECK(line.find('\n') == std::string::npos);
  const auto back = parse_line(line);
  REQUIRE(back);
  CHECK(back->version == 1);
  CHECK(back->seq == 12);
  CHECK(back->wall_ms == e.wall_ms);
  CHECK(back->mono_s == e.mono_s);
  CHECK(back->node == e.node);
  CHECK(back->host == e.host);
  CHECK(back->type == e.type);
  CHECK(back->fields == e.fields);
}

TEST_CASE("a field named like a common one cannot replace it", "[events]") {
  Event e;
  e.type = "progress";
  e.node = "n";
  e.fields = {{"seq", 99}, {"event", "forged"}, {"round", 1}};
  const auto back = parse_line(format_line(e));
  REQUIRE(back);
  CHECK(back->seq == 0);
  CHECK(back->type == "progress");
  CHECK(back->fields == nlohmann::json{{"round", 1}});
}

TEST_CASE("a reader keeps fields it does not know and reads a newer version", "[events]") {
  const auto e =
      parse_line(R"({"v":2,"seq":0,"time":"2026-12-02T01:02:03.004Z","mono_s":1,"node":"n",)"
                 R"("event":"new_kind","added":{"x":1}})");
  REQUIRE(e);
  CHECK(e->version == 2);
  CHECK(e->host.empty());
  CHECK(e->type == "new_kind");
  CHECK(e->fields["added"]["x"] == 1);
}

TEST_CASE("a line without the common fields is refused with the reason", "[events]") {
  std::string why;
  CHECK_FALSE(parse_line("not json", &why));
  CHECK(why == "not JSON");
  CHECK_FALSE(parse_line("[1,2]", &why));
  CHECK(why == "not a JSON object");
  CHECK_FALSE(parse_line(R"({"seq":0})", &why));
  CHECK_THAT(why, Contains("\"v\""));
  CHECK_FALSE(
      parse_line(R"({"v":1,"seq":0,"time":"yesterday","mono_s":1,"node":"n","event":"x"})", &why));
  CHECK_THAT(why, Contains("yesterday"));
  CHECK_FALSE(parse_line(R"({"v":1,"seq":0,"time":"2026-12-02T01:02:03.004Z","mono_s":1,)"
                         R"("node":"n"})",
                         &why));
  CHECK_THAT(why, Contains("\"event\""));
}

TEST_CASE("times are UTC with milliseconds, and only that layout parses", "[events]") {
  CHECK(format_time(0) == "1970-01-01T00:00:00.000Z");
  CHECK(parse_time("2026-12-02T01:02:03.004Z") == 1'796'173'323'004);
  CHECK(parse_time(format_time(1'796'173'323'004)) == 1'796'173'323'004);
  CHECK_FALSE(parse_time("2026-12-02 01:02:03.004Z"));
  CHECK_FALSE(parse_time("2026-12-02T01:02:03Z"));
}

TEST_CASE("invalid UTF-8 in a field is replaced, not thrown", "[events]") {
  Event e;
  e.type = "workers_end";
  e.node = "n";
  e.fields = {{"reason", std::string("bad \xff byte")}};
  const auto back = parse_line(format_line(e));
  REQUIRE(back);
  CHECK_THAT(back->fields["reason"].get<std::string>(), Contains("bad "));
}

TEST_CASE("the log writes every thread's events, one line each, in seq order", "[events]") {
  elasticrun::test::TempDir dir;
  const std::string path = dir / "events.jsonl";
  {
    EventLog log(LogOptions{path, false, "node-a", "host-a"});
    REQUIRE(log.enabled());
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&log, t] {
        for (int i = 0; i < 250; ++i) log.record("progress", {{"thread", t}, {"i", i}});
      });
    }
    for (auto& th : threads) th.join();
    log.flush();
    CHECK(read_lines(path).size() == 1000);
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 1000);
  std::vector<int> next(4, 0);
  double mono = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto e = parse_line(lines[i]);
    REQUIRE(e);
    CHECK(e->seq == static_cast<int64_t>(i));
    CHECK(e->node == "node-a");
    CHECK(e->mono_s >= mono);
    mono = e->mono_s;
    const int t = e->fields["thread"];
    CHECK(e->fields["i"] == next[static_cast<size_t>(t)]++);
  }
}

TEST_CASE("the log appends to a file that exists", "[events]") {
  elasticrun::test::TempDir dir;
  const std::string path = dir / "events.jsonl";
  { std::ofstream(path) << "earlier line\n"; }
  {
    EventLog log(LogOptions{path, false, "n", "h"});
    log.record("agent_start");
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "earlier line");
  CHECK(parse_line(lines[1])->type == "agent_start");
}

TEST_CASE("a log that cannot be opened is an error naming it; a disabled one records nothing",
          "[events]") {
  elasticrun::test::TempDir dir;
  const std::string path = dir / "no-such-dir/events.jsonl";
  CHECK_THROWS_WITH(EventLog(LogOptions{path, false, "n", "h"}),
                    Contains("cannot open the event log " + path));
  EventLog& none = EventLog::disabled();
  CHECK_FALSE(none.enabled());
  none.record("agent_start");
  none.flush();
}

TEST_CASE("docs/events.md documents every event type the agent records", "[events]") {
  std::ifstream in(std::string(ELASTICRUN_SOURCE_DIR) + "/docs/events.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  std::set<std::string_view> seen;
  for (auto t : type::kAll) {
    INFO(t);
    CHECK(seen.insert(t).second);
    CHECK_THAT(doc, Contains("### `" + std::string(t) + "`"));
  }
}
