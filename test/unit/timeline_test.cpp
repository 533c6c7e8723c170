// elasticctl timeline (src/timeline): a run's history from event logs (the
// world size, each node's series, one mark per event, a round's end once
// however many members logged it), and the PNG and HTML made from it.
#include "timeline/timeline.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "elasticrun/errors.hpp"
#include "events/event.hpp"
#include "temp_dir.hpp"
#include "timeline/history.hpp"

namespace elasticrun::timeline {
namespace {

constexpr int64_t kT0 = 1'796'162'400'000;

struct LogWriter {
  std::ofstream out;
  std::string node, host;
  int64_t seq = 0;

  LogWriter(const std::string& path, std::string n, std::string h)
      : out(path), node(std::move(n)), host(std::move(h)) {}

  void add(double at_s, const std::string& type, nlohmann::json fields = nlohmann::json::object()) {
    events::Event e;
    e.seq = seq++;
    e.wall_ms = kT0 + static_cast<int64_t>(at_s * 1000);
    e.mono_s = at_s;
    e.node = node;
    e.host = host;
    e.type = type;
    e.fields = std::move(fields);
    out << events::format_line(e) << "\n";
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two nodes' logs of a run: round 1 at 4 workers, a hang, a restart, round 2 at 6.
std::vector<std::string> write_run(const test::TempDir& dir) {
  const std::string a = dir / "a.jsonl", b = dir / "b.jsonl";
  {
    LogWriter l(a, "a-1-x", "host-a");
    l.add(0, "agent_start", {{"run_id", "job7"}, {"backend", "c10d"}});
    l.add(1, "round_start", {{"round", 1}, {"world_size", 4}, {"nodes", 2}});
    l.add(6, "progress", {{"steps", {10, 9}}, {"steps_per_s", 2.0}, {"tokens_per_s", 640.0}});
    l.add(11, "progress", {{"steps", {20, 20}}, {"steps_per_s", 2.0}, {"tokens_per_s", 660.0}});
    l.add(12, "section", {{"name", "ckpt"}, {"seconds", 1.5}, {"rank", 0}});
    l.add(12.2, "section", {{"name", "ckpt"}, {"seconds", 1.75}, {"rank", 1}});
    l.add(15, "policy_decision",
          {{"kind", "restart"}, {"target", 3}, {"reason", "<script>alert(1)</script>"}});
    l.add(15.5, "round_end", {{"round", 1}, {"kind", "restart"}, {"reason", "Hang on host-b"}});
    l.add(17, "round_start", {{"round", 2}, {"world_size", 6}, {"nodes", 3}});
    l.add(19, "a_type_of_a_later_schema", {{"x", 1}});
    l.add(30, "agent_end", {{"exit_code", 0}});
  }
  {
    LogWriter l(b, "b-2-y", "host-b");
    l.add(1.1, "round_start", {{"round", 1}, {"world_size", 4}, {"nodes", 2}});
    l.add(14, "health_fault", {{"reason", "Hang"}, {"rank", 3}, {"message", "no step for 5 s"}});
    l.add(15.6, "round_end", {{"round", 1}, {"kind", "restart"}, {"reason", "Hang on host-b"}});
    l.out << "{\"torn\": \n";  // a line an agent killed mid-write left
  }
  return {a, b};
}

}  // namespace

TEST_CASE("a run's history merges nodes' logs and counts a round's end once", "[timeline]") {
  test::TempDir dir;
  const RunHistory h = read_history(write_run(dir));
  CHECK(h.run_id == "job7");
  CHECK(h.skipped == 1);
  CHECK(h.events == 14);
  CHECK(h.end_s == Approx(30));
  CHECK(h.samples);  // the ranks report tokens_per_s

  // 4 workers from round 1's start, none between the rounds, 6 in round 2, none after.
  REQUIRE(h.world_size.size() == 4);
  CHECK(h.world_size[0].t == Approx(1));
  CHECK(h.world_size[0].v == 4);
  CHECK(h.world_size[1].t == Approx(15.5));
  CHECK(h.world_size[1].v == 0);
  CHECK(h.world_size[2].v == 6);
  CHECK(h.world_size[3].t == Approx(30));
  CHECK(h.world_size[3].v == 0);

  REQUIRE(h.nodes.size() == 1);
  CHECK(h.nodes[0].host == "host-a");
  REQUIRE(h.nodes[0].step.size() == 2);
  CHECK(h.nodes[0].step[1].v == 20);
  CHECK(h.nodes[0].throughput[0].v == 640);

  int rounds = 0, sections = 0, faults = 0, unknown = 0;
  for (const auto& m : h.marks) {
    rounds += m.kind == MarkKind::kRound;
    faults += m.kind == MarkKind::kFault;
    if (m.kind == MarkKind::kSection) {
      ++sections;
      CHECK(m.count == 2);  // both ranks' ckpt sections: one mark
      CHECK(m.seconds == Approx(1.75));
    }
    if (m.type == "a_type_of_a_later_schema") {
      ++unknown;
      CHECK(m.label == m.type);
    }
  }
  CHECK(rounds == 1);
  CHECK(sections == 1);
  CHECK(faults == 1);
  CHECK(unknown == 1);
  for (size_t i = 1; i < h.marks.size(); ++i) CHECK(h.marks[i - 1].t <= h.marks[i].t);
}

TEST_CASE("the timeline is a PNG or a self-contained HTML page", "[timeline]") {
  test::TempDir dir;
  TimelineOptions o;
  o.logs = write_run(dir);

  o.out = dir / "run.png";
  write_timeline(o);
  const std::string png = read(o.out);
  REQUIRE(png.size() > 1000);
  REQUIRE(png.substr(0, 8) == "\x89PNG\r\n\x1a\n");
  // IHDR: the width, big-endian, at byte 16.
  const auto byte = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(png[i]));
  };
  CHECK((byte(16) << 24 | byte(17) << 16 | byte(18) << 8 | byte(19)) == 1200);

  o.out = dir / "run.html";
  write_timeline(o);
  const std::string html = read(o.out);
  CHECK_THAT(html, Catch::StartsWith("<!DOCTYPE html>"));
  CHECK_THAT(html, Catch::Contains("<svg"));
  CHECK_THAT(html, Catch::Contains("Hang rank 3"));
  // Nothing to fetch, and a reason is text, never markup.
  CHECK_THAT(html, !Catch::Contains("http"));
  CHECK_THAT(html, !Catch::Contains("src="));
  CHECK_THAT(html, !Catch::Contains("<script>"));
  CHECK_THAT(html, Catch::Contains("&lt;script&gt;"));
}

TEST_CASE("a timeline of the wrong kind, or of no events, is an error that writes nothing",
          "[timeline]") {
  test::TempDir dir;
  TimelineOptions o;
  o.logs = write_run(dir);
  o.out = dir / "run.pdf";
  REQUIRE_THROWS_AS(write_timeline(o), ConfigError);
  CHECK_FALSE(std::filesystem::exists(o.out));

  std::ofstream(dir / "empty.jsonl") << "not an event\n";
  o.logs = {dir / "empty.jsonl"};
  o.out = dir / "run.png";
  REQUIRE_THROWS_WITH(write_timeline(o), Catch::Contains("no event in 1 file"));
  o.logs = {dir / "absent.jsonl"};
  REQUIRE_THROWS_WITH(write_timeline(o), Catch::Contains("cannot read the event log"));
  CHECK_FALSE(std::filesystem::exists(o.out));
}

}  // namespace elasticrun::timeline
