// elasticctl watch (src/ctl/watch_*): the status it reads carries each
// rank's step from the members' heartbeats, the model turns looks into
// events and step rates, and a frame fits the terminal it is drawn for.
#include <catch2/catch.hpp>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "ctl/job_status.hpp"
#include "ctl/watch_model.hpp"
#include "ctl/watch_view.hpp"
#include "job_agents.hpp"

namespace elasticrun::ctl {
namespace {

using namespace std::chrono_literals;
using rendezvous::EndKind;
using rendezvous::EndRecord;
using Clock = std::chrono::system_clock;

constexpr const char* kRunId = "watch";

// Fields a test fills in by hand: a status as read_status would return it.
JobStatus running_job(int nodes, int per_node) {
  JobStatus s;
  s.job = {"127.0.0.1", 29400, "demo", {}};
  s.open_round = 3;
  s.round = 2;
  s.closed = std::to_string(nodes) + " 1";  // Closed: candidates, closer
  s.world_size = nodes * per_node;
  for (int n = 0; n < nodes; ++n) {
    MemberInfo m;
    m.group_rank = n;
    m.rank_offset = n * per_node;
    m.agent = {"node" + std::to_string(n), "host" + std::to_string(n), per_node, false};
    rendezvous::HeartbeatRecord b = rendezvous::HeartbeatRecord::at(1'000'000);
    for (int lr = 0; lr < per_node; ++lr) b.rank_steps.push_back(100 - lr);
    b.step = 100;
    b.samples_per_s = 250;
    m.beat = b;
    s.members.push_back(std::move(m));
  }
  return s;
}

size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

}  // namespace

TEST_CASE("status carries each rank's step from the members' heartbeats", "[watch]") {
  test::ServerFixture store;
  test::JobAgents agents(store, kRunId, 2, 2, 2);
  for (int i = 0; i < 2; ++i) {
    agents.progress[static_cast<size_t>(i)]->step = 10 + i;
    agents.progress[static_cast<size_t>(i)]->set_ranks({10 + i, 9 + i},
                                                       i == 0 ? std::optional(64.0) : std::nullopt);
  }
  agents.join_all();
  // A join writes a beat of the time alone; the heartbeat's next one has the steps.
  std::this_thread::sleep_for(200ms);

  const JobAddress job{"127.0.0.1", store.port(), kRunId, {}};
  StoreClient client = connect_job(job, 5s, 10s);
  const JobStatus s = read_status(client, job);
  REQUIRE(s.members.size() == 2);
  for (const auto& m : s.members) {
    REQUIRE(m.beat);
    const int i = m.agent.node_id == "node0" ? 0 : 1;
    CHECK(m.beat->step == 10 + i);
    CHECK(m.beat->rank_steps == std::vector<int64_t>{10 + i, 9 + i});
    CHECK(m.beat->samples_per_s == (i == 0 ? std::optional(64.0) : std::nullopt));
  }
  const auto j = nlohmann::json::parse(format_json(s));
  CHECK(j["members"][0]["steps"].size() == 2);
  CHECK(j["recent_rounds"].empty());

  // A round that ended is in `recent`, oldest first, with its reason.
  EndRecord end;
  end.kind = EndKind::kScaleDown;
  end.target = 1;
  end.reason = "release of 1 node";
  agents.rdzv[0]->end_round(1, end);
  const JobStatus after = read_status(client, job);
  REQUIRE(after.recent.size() == 1);
  CHECK(after.recent[0].round == 1);
  CHECK(after.recent[0].end.reason == "release of 1 node");
}

TEST_CASE("the watch model turns looks into events and step rates", "[watch]") {
  WatchModel m;
  JobStatus s = running_job(2, 2);
  EndRecord grew;
  grew.kind = EndKind::kScaleUp;
  grew.target = 2;
  grew.reason = "1 agent waiting";
  s.recent.push_back({1, grew});
  const auto t0 = Clock::time_point(1000s);
  m.update(s, t0);
  // What ended before the first look has no time.
  REQUIRE(m.events().size() == 2);
  CHECK_FALSE(m.events()[0].seen);
  CHECK(m.events()[0].text == "round 1 ended: scale_up -> 2 nodes: 1 agent waiting");
  CHECK(m.events()[1].text == "round 2 runs: 2 nodes, world size 4");
  CHECK_FALSE(m.step_rate("node0"));

  // A second look: 20 steps in 2 s; a spare arrives; a node is excluded.
  for (auto& member : s.members) {
    member.beat->unix_ms += 2000;
    member.beat->step += 20;
  }
  s.waiting.push_back({"node9", "host9", 2, false});
  s.excluded.push_back({"host7", 0, 1, "Hang rank 3"});
  m.update(s, t0 + 2s);
  REQUIRE(m.step_rate("node0"));
  CHECK(*m.step_rate("node0") == Approx(10.0));
  REQUIRE(m.events().size() == 4);
  CHECK(m.events()[2].text == "host9 waits as a spare");
  CHECK(m.events()[2].seen == t0 + 2s);
  CHECK(m.events()[3].text == "host7 excluded: Hang rank 3");

  // The same beat read again keeps the rate; a store that is gone is said once.
  m.update(s, t0 + 3s);
  CHECK(*m.step_rate("node0") == Approx(10.0));
  m.unreachable("cannot reach the store", t0 + 4s);
  m.unreachable("cannot reach the store", t0 + 5s);
  CHECK(m.events().back().text == "store unreachable: cannot reach the store");
  CHECK(m.events().size() == 5);
}

TEST_CASE("a watch frame fits an 80x24 terminal and shows every rank while they fit", "[watch]") {
  WatchModel m;
  JobStatus s = running_job(2, 4);
  s.members[0].agent.host = "a-very-long-host-name-that-does-not-fit.example.com";
  m.update(s, Clock::now());
  ViewOptions o;
  o.size = {80, 24};
  const auto lines = render_watch(s, m, o, Clock::now());
  REQUIRE(lines.size() == 24);
  for (const auto& l : lines) {
    CHECK(columns(l) <= 80);
    for (unsigned char ch : l) CHECK(ch >= 0x20);
  }
  CHECK_THAT(lines[0], Catch::StartsWith("job 'demo' on 127.0.0.1:29400: running"));
  CHECK_THAT(lines[1], Catch::Contains("world size 8   nodes 2"));
  CHECK_THAT(lines[2], Catch::Contains("500 samples/s"));
  int rank_rows = 0;
  for (const auto& l : lines) rank_rows += l.find("[#") != std::string::npos;
  CHECK(rank_rows == 8);
  CHECK_THAT(lines.back(), Catch::StartsWith("Ctrl-C quits"));
  // Not a terminal's frame (a pipe, --once): no padding to the height.
  o.fill = false;
  const auto plain = render_watch(s, m, o, Clock::now());
  CHECK(plain.size() < lines.size());
  CHECK_FALSE(plain[plain.size() - 2].empty());
  CHECK_THAT(plain.back(), Catch::StartsWith("Ctrl-C quits"));
  o.fill = true;

  // Too many ranks for the rows: a row per node, with its ranks.
  JobStatus big = running_job(6, 8);
  o.size = {80, 20};
  const auto small = render_watch(big, m, o, Clock::now());
  REQUIRE(small.size() == 20);
  bool node_row = false;
  for (const auto& l : small) node_row |= l.rfind("0-7 ", 0) == 0;
  CHECK(node_row);
}

TEST_CASE("fit cuts at a column and never passes control characters", "[watch]") {
  CHECK(fit("abcdef", 3) == "abc");
  CHECK(fit("a\x1b[2Jb", 10) == "a [2Jb");
  CHECK(fit("h\xc3\xa9llo", 2) == "h\xc3\xa9");
  CHECK(fit("\xff"
            "x",
            5) == " x");
}

}  // namespace elasticrun::ctl
