// The dynamic rendezvous protocol against a real store: many agents (threads
// with their own connections) joining rounds at once. The tests of the
// protocol itself run twice: on elasticrun's store and on a real etcd.
#include "rendezvous/rendezvous.hpp"

#include <catch2/catch.hpp>
#include <future>
#include <set>
#include <thread>

#include "etcd_fixture.hpp"
#include "rendezvous/heartbeat.hpp"
#include "server_fixture.hpp"

namespace elasticrun::rendezvous {
namespace {

using namespace std::chrono_literals;
using test::ServerFixture;

// The rendezvous store of a test: elasticrun's, or an etcd cluster.
struct OurStore : ServerFixture {
  void configure(RendezvousConfig& c) const {
    c.store_host = "127.0.0.1";
    c.store_port = port();
  }
};
struct Etcd : test::EtcdFixture {
  void configure(RendezvousConfig& c) const { c.etcd = options(); }
};

template <typename Store>
RendezvousConfig config_for(const Store& s, const std::string& node, int min, int max) {
  RendezvousConfig c;
  s.configure(c);
  c.run_id = "test";
  c.node_id = node;
  c.host = "127.0.0.1";
  c.sizes.min_replicas = min;
  c.sizes.max_replicas = max;
  c.join_timeout = 20s;
  c.last_call_timeout = 200ms;
  c.rejoin_timeout = 5s;
  c.heartbeat_interval = 50ms;
  c.missed_heartbeats = 4;
  c.store_timeout = 10s;
  return c;
}

// Joins from a thread; the future holds the assignment (or the exception).
std::future<Assignment> join_async(Rendezvous& r, bool released = false) {
  return std::async(std::launch::async, [&r, released] { return r.join(released); });
}

// Agents with their heartbeats, as the agent runs them.
struct Fleet {
  std::vector<std::unique_ptr<Rendezvous>> agents;
  std::vector<std::unique_ptr<Heartbeat>> beats;
  Rendezvous& operator[](size_t i) { return *agents[i]; }
  size_t size() const { return agents.size(); }
  void add(const RendezvousConfig& c) {
    agents.push_back(std::make_unique<Rendezvous>(c));
    beats.push_back(std::make_unique<Heartbeat>(c));
  }
};

template <typename Store>
Fleet agents(const Store& s, int n, int min, int max, int local_world_size = 1) {
  Fleet v;
  for (int i = 0; i < n; ++i) {
    auto c = config_for(s, "node" + std::to_string(i), min, max);
    c.local_world_size = local_world_size;
    v.add(c);
  }
  return v;
}

std::vector<Assignment> join_all(Fleet& v, const std::set<size_t>& released = {}) {
  std::vector<std::future<Assignment>> fs;
  for (size_t i = 0; i < v.size(); ++i) fs.push_back(join_async(v[i], released.count(i) > 0));
  std::vector<Assignment> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

void require_dense(const std::vector<Assignment>& as, int local_world_size) {
  std::set<int> ranks;
  for (const auto& a : as) {
    ranks.insert(a.group_rank);
    REQUIRE(a.group_world_size == static_cast<int>(as.size()));
    REQUIRE(a.world_size == static_cast<int>(as.size()) * local_world_size);
    REQUIRE(a.rank_offset == a.group_rank * local_world_size);
    REQUIRE(a.round == as[0].round);
    REQUIRE(a.leader_node_id == as[0].leader_node_id);
  }
  REQUIRE(ranks.size() == as.size());
  REQUIRE(*ranks.begin() == 0);
  REQUIRE(*ranks.rbegin() == static_cast<int>(as.size()) - 1);
}

}  // namespace

TEMPLATE_TEST_CASE("agents joining at once get group ranks 0..n-1 without gaps", "[rendezvous]",
                   OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 8, 8, 8, 4);
  const auto as = join_all(v);
  require_dense(as, 4);
  REQUIRE(as[0].round == 1);
}

TEMPLATE_TEST_CASE("a round with a range closes after the last call with everyone who came",
                   "[rendezvous]", OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 3, 2, 4);
  const auto as = join_all(v);
  require_dense(as, 1);
}

TEMPLATE_TEST_CASE(
    "an agent beyond the allowed sizes waits as a spare and is used first after a loss",
    "[rendezvous]", OurStore, Etcd) {
  TestType store;
  // Discrete sizes 2 and 4: three agents make a round of two and a spare.
  std::vector<std::unique_ptr<Rendezvous>> w;
  for (int i = 0; i < 3; ++i) {
    auto c = config_for(store, "d" + std::to_string(i), 2, 4);
    c.sizes.discrete_values = {2, 4};
    w.push_back(std::make_unique<Rendezvous>(c));
  }
  // Heartbeats keep the first arrival (the closer) visibly alive.
  std::vector<std::unique_ptr<Heartbeat>> beats;
  for (auto& r : w) beats.push_back(std::make_unique<Heartbeat>(r->config()));
  auto f0 = join_async(*w[0]);
  auto f1 = join_async(*w[1]);
  const Assignment a0 = f0.get(), a1 = f1.get();
  REQUIRE(a0.group_world_size == 2);
  // The third arrives after the round closed: it becomes a spare of round 2.
  auto f2 = join_async(*w[2]);
  REQUIRE(f2.wait_for(300ms) == std::future_status::timeout);
  REQUIRE(w[0]->waiting_after(1) == 1);

  // Node d1 is lost: the round ends with a replacement wanted.
  EndRecord end;
  end.kind = EndKind::kReplace;
  end.target = 2;
  end.survivors = 1;
  end.wait = 5s;
  end.reason = "d1 lost";
  const int survivor = a0.group_rank == 0 ? 0 : 1;
  w[static_cast<size_t>(survivor)]->end_round(1, end);
  const Assignment s = w[static_cast<size_t>(survivor)]->join();
  const Assignment spare = f2.get();
  REQUIRE(s.round == 2);
  REQUIRE(spare.round == 2);
  REQUIRE(s.group_rank == 0);  // the survivor keeps its place ahead of the newcomer
  REQUIRE(spare.group_rank == 1);
  REQUIRE(spare.group_world_size == 2);
}

TEMPLATE_TEST_CASE("survivors keep their relative order and newcomers are appended", "[rendezvous]",
                   OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 3, 3, 4);
  const auto first = join_all(v);
  require_dense(first, 1);
  // A fourth agent joins round 2 and waits; the leader scales up.
  auto late = std::make_unique<Rendezvous>(config_for(store, "late", 3, 4));
  auto beat_late = std::make_unique<Heartbeat>(late->config());
  auto f = join_async(*late);
  while (v[0].waiting_after(1) < 1) std::this_thread::sleep_for(10ms);
  EndRecord up;
  up.kind = EndKind::kScaleUp;
  up.target = 4;
  up.survivors = 3;
  up.wait = 5s;
  v[0].end_round(1, up);
  // Survivors rejoin in reverse order of their ranks: order must not matter.
  std::vector<size_t> order = {0, 1, 2};
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return first[x].group_rank > first[y].group_rank; });
  std::vector<std::future<Assignment>> fs;
  for (size_t i : order) {
    fs.push_back(join_async(v[i]));
    std::this_thread::sleep_for(20ms);
  }
  std::vector<Assignment> second(3);
  for (size_t k = 0; k < order.size(); ++k) second[order[k]] = fs[k].get();
  const Assignment newcomer = f.get();
  for (size_t i = 0; i < 3; ++i) REQUIRE(second[i].group_rank == first[i].group_rank);
  REQUIRE(newcomer.group_rank == 3);
  REQUIRE(newcomer.group_world_size == 4);
}

TEMPLATE_TEST_CASE("a released node is admitted after every survivor even when it rejoins first",
                   "[rendezvous]", OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 3, 2, 3);
  const auto first = join_all(v);
  size_t highest = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (first[i].group_rank == 2) highest = i;
  }
  EndRecord rel;
  rel.kind = EndKind::kScaleDown;
  rel.target = 2;
  rel.survivors = 2;
  rel.release = 1;
  rel.wait = 5s;
  v[0].end_round(1, rel);
  auto fr = join_async(v[highest], /*released=*/true);
  std::this_thread::sleep_for(100ms);
  std::vector<std::future<Assignment>> fs;
  for (size_t i = 0; i < 3; ++i) {
    if (i != highest) fs.push_back(join_async(v[i]));
  }
  for (auto& f : fs) {
    const Assignment a = f.get();
    REQUIRE(a.round == 2);
    REQUIRE(a.group_world_size == 2);
  }
  // The released node waits as a spare of round 3.
  REQUIRE(fr.wait_for(200ms) == std::future_status::timeout);
  v[highest].cancel();
  REQUIRE_THROWS_AS(fr.get(), RendezvousClosed);
}

TEMPLATE_TEST_CASE("too few agents within the join timeout fail the round with a clear message",
                   "[rendezvous]", OurStore, Etcd) {
  TestType store;
  auto c = config_for(store, "alone", 2, 2);
  c.join_timeout = 300ms;
  Rendezvous r(c);
  Heartbeat beat(c);
  try {
    r.join();
    FAIL("join should have timed out");
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    REQUIRE_THAT(what, Catch::Contains("1 agent(s) joined"));
    REQUIRE_THAT(what, Catch::Contains("at least 2 needed"));
  }
}

TEMPLATE_TEST_CASE("only one end record wins and the next round aims for its target",
                   "[rendezvous]", OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 2, 2, 2);
  join_all(v);
  EndRecord a, b;
  a.kind = EndKind::kRestart;
  a.target = 2;
  a.reason = "first";
  b.kind = EndKind::kFail;
  b.reason = "second";
  REQUIRE(v[0].end_round(1, a).reason == "first");
  REQUIRE(v[1].end_round(1, b).reason == "first");
  const auto seen = v[1].wait_end(1, 1s);
  REQUIRE(seen);
  REQUIRE(seen->kind == EndKind::kRestart);
  REQUIRE_FALSE(v[0].wait_end(2, 50ms));
}

TEMPLATE_TEST_CASE("a leaver's memory handoff: its offer awaited, the members' restores counted",
                   "[rendezvous][memory]", OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 3, 3, 3);
  join_all(v);
  // A member that keeps no tier published no holdings: it reads as none,
  // the others' as they are.
  v[0].publish_memory({"127.0.0.1", 4000, 12, {"step_000000012.r0of3"}, {}});
  const auto held = v[1].memory_of({"node0", "node1"});
  REQUIRE(held.size() == 2);
  REQUIRE(held[0]);
  REQUIRE(held[0]->snapshots == std::vector<std::string>{"step_000000012.r0of3"});
  REQUIRE_FALSE(held[1]);

  REQUIRE(v[0].memory_offers(1, 50ms).empty());  // nobody leaves
  v[1].announce_leaving(1);
  v[2].announce_leaving(1);
  v[1].offer_memory(1, false);  // its newest state is not sharded
  // node2 has not offered yet: the wait ends with the offers made by then.
  REQUIRE(v[0].memory_offers(1, 100ms).empty());
  auto late = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(100ms);
    v[2].offer_memory(1, true);
  });
  REQUIRE(v[0].memory_offers(1, 5s) == std::vector<std::string>{"node2"});
  late.get();

  REQUIRE(v[2].members_if_closed(1)->size() == 3);
  REQUIRE_FALSE(v[2].members_if_closed(2));
  REQUIRE(v[0].memory_taken(1) == 1);
  REQUIRE(v[2].memory_taken(1, 0) == 1);
  REQUIRE_FALSE(v[2].ended(1));
  EndRecord rec;
  rec.kind = EndKind::kScaleDown;
  v[0].end_round(1, rec);
  REQUIRE(v[2].ended(1));
}

TEMPLATE_TEST_CASE("a finished job makes late joiners and spares leave", "[rendezvous]", OurStore,
                   Etcd) {
  TestType store;
  auto v = agents(store, 1, 1, 1);
  join_all(v);
  v[0].mark_job_finished(false, "every worker succeeded");
  auto late = std::make_unique<Rendezvous>(config_for(store, "late", 1, 1));
  Heartbeat late_beat(late->config());
  try {
    late->join();
    FAIL("join should have reported the finished job");
  } catch (const RendezvousClosed& e) {
    REQUIRE_FALSE(e.failed());
    REQUIRE_THAT(std::string(e.what()), Catch::Contains("every worker succeeded"));
  }
}

TEST_CASE("end records survive a serialisation round trip and garbage is refused", "[rendezvous]") {
  EndRecord r;
  r.kind = EndKind::kScaleDown;
  r.target = 3;
  r.survivors = 2;
  r.wait = 1500ms;
  r.release = 1;
  r.reason = "node x leaves: spot notice";
  const EndRecord p = EndRecord::parse(r.serialize());
  REQUIRE(p.kind == r.kind);
  REQUIRE(p.target == 3);
  REQUIRE(p.survivors == 2);
  REQUIRE(p.wait == 1500ms);
  REQUIRE(p.release == 1);
  REQUIRE(p.reason == r.reason);
  REQUIRE_THROWS_AS(EndRecord::parse("explode 1 2 3 4 x"), StoreError);
  REQUIRE_THROWS_AS(EndRecord::parse("restart x"), StoreError);
}

TEST_CASE("a heartbeat is stale once older than the limit or not a time at all", "[rendezvous]") {
  REQUIRE_FALSE(heartbeat_stale("1000", 1100, 100ms));
  REQUIRE(heartbeat_stale("1000", 1101, 100ms));
  REQUIRE_FALSE(heartbeat_stale("1000", 900, 100ms));  // a clock slightly behind
  REQUIRE(heartbeat_stale("", 0, 100ms));
  REQUIRE(heartbeat_stale("12x", 0, 100ms));
}

TEMPLATE_TEST_CASE("a spare that died while waiting is not admitted when the next round closes",
                   "[rendezvous]", OurStore, Etcd) {
  TestType store;
  auto v = agents(store, 2, 2, 3);
  join_all(v);
  // A spare joins round 2, then dies: its heartbeat stops.
  auto spare = std::make_unique<Rendezvous>(config_for(store, "ghost", 2, 3));
  auto spare_beat = std::make_unique<Heartbeat>(spare->config());
  auto f = join_async(*spare);
  while (v[0].waiting_after(1) < 1) std::this_thread::sleep_for(10ms);
  REQUIRE(v[0].live_waiting_after(1) == 1);
  spare_beat.reset();
  spare->cancel();
  REQUIRE_THROWS_AS(f.get(), RendezvousClosed);
  std::this_thread::sleep_for(300ms);  // past 4 missed beats of 50 ms
  REQUIRE(v[0].live_waiting_after(1) == 0);
  EndRecord up;
  up.kind = EndKind::kScaleUp;
  up.target = 3;
  up.survivors = 2;
  up.wait = 300ms;
  v[0].end_round(1, up);
  const auto second = join_all(v);
  require_dense(second, 1);
  REQUIRE(second[0].round == 2);
}

TEST_CASE("an agent takes over the close of a dead closer and ignores what it wrote",
          "[rendezvous]") {
  OurStore store;
  // The first arrival of round 1 joined, wrote assignments for a round of its
  // own making, and died before closing: its heartbeat is old.
  auto raw = StoreClient::connect("127.0.0.1", static_cast<uint16_t>(store.port()),
                                  {.key_prefix = keys::prefix("test"), .secret = {}});
  raw.compare_set(keys::kRound, "", "1");
  REQUIRE(raw.add(keys::round_key(1, "count"), 1) == 1);
  raw.multi_set({keys::round_key(1, keys::join_record(1)), keys::heartbeat("dead")},
                {"dead\n127.0.0.1\n1\n0\n-1\n0", "1"});
  raw.set(keys::round_key(1, keys::assignment(1, 2)), "ok 5 9 40 99 dead");

  auto v = agents(store, 1, 1, 1);
  const auto a = v[0].join();
  REQUIRE(a.group_rank == 0);
  REQUIRE(a.group_world_size == 1);
  REQUIRE(a.world_size == 1);
  REQUIRE(a.leader_node_id == "node0");
  const auto closed = Closed::parse(raw.get(keys::round_key(1, "closed")));
  REQUIRE(closed);
  REQUIRE(closed->candidates == 2);
  REQUIRE(closed->closer == 2);
}

TEST_CASE("a closed record names its candidates and closer; failures and garbage are not one",
          "[rendezvous]") {
  const Closed c{12, 3};
  REQUIRE(c.serialize() == "12 3");
  const auto back = Closed::parse(c.serialize());
  REQUIRE(back);
  REQUIRE(back->candidates == 12);
  REQUIRE(back->closer == 3);
  for (const char* bad : {"", "12", "fail 1 agent(s) joined", "failjob restarts spent", "1 0",
                          "-1 2", "3 x", "3 2 1", "12  3"}) {
    INFO(bad);
    REQUIRE_FALSE(Closed::parse(bad));
  }
}

}  // namespace elasticrun::rendezvous
