// The rendezvous's store records (src/rendezvous/records.hpp): each value
// reads back as it was written, a malformed one is refused by parse() and
// skipped by try_parse(), and fields a newer agent appends are ignored.
#include "rendezvous/records.hpp"

#include <catch2/catch.hpp>

#include "elasticrun/errors.hpp"

using namespace elasticrun;
using namespace elasticrun::rendezvous;

TEST_CASE("a join record reads back field for field", "[records]") {
  JoinRecord r;
  r.node_id = "n1-42-abc";
  r.host = "10.0.0.7";
  r.local_world_size = 8;
  r.prev_round = 5;
  r.prev_rank = 2;
  r.released = true;
  const JoinRecord back = JoinRecord::parse(r.serialize());
  CHECK(back.node_id == r.node_id);
  CHECK(back.host == r.host);
  CHECK(back.local_world_size == 8);
  CHECK(back.prev_round == 5);
  CHECK(back.prev_rank == 2);
  CHECK(back.released);
}

TEST_CASE("a join record with fields appended by a newer agent still parses", "[records]") {
  const auto r = JoinRecord::parse("id\nhost\n4\n0\n-1\n0\nsomething new");
  CHECK(r.local_world_size == 4);
  CHECK_FALSE(r.released);
}

TEST_CASE("a truncated join record is an error for agents and nothing for readers", "[records]") {
  CHECK_THROWS_AS(JoinRecord::parse("id\nhost\n4"), StoreError);
  CHECK_THROWS_AS(JoinRecord::parse("id\nhost\nfour\n0\n-1\n0"), StoreError);
  CHECK_FALSE(JoinRecord::try_parse("id\nhost\n4"));
}

TEST_CASE("a placement is either a member's place or spare", "[records]") {
  Placement p;
  p.admitted = true;
  p.group_rank = 3;
  p.group_world_size = 4;
  p.rank_offset = 24;
  p.world_size = 32;
  p.leader_node_id = "lead";
  CHECK(p.serialize() == "ok 3 4 24 32 lead");
  const Placement back = Placement::parse(p.serialize());
  CHECK(back.admitted);
  CHECK(back.rank_offset == 24);
  CHECK(back.leader_node_id == "lead");
  CHECK(Placement{}.serialize() == "spare");
  CHECK_FALSE(Placement::parse("spare").admitted);
  CHECK_THROWS_AS(Placement::parse("ok 1 2"), StoreError);
  CHECK_FALSE(Placement::try_parse("maybe 1 2 3 4 x"));
}

TEST_CASE("a round closed without members says whether the job failed", "[records]") {
  const auto round = ClosedWithout::parse(ClosedWithout{false, "1 agent(s) joined"}.serialize());
  REQUIRE(round);
  CHECK_FALSE(round->job_failed);
  CHECK(round->why == "1 agent(s) joined");
  const auto job = ClosedWithout::parse("failjob --max-restarts 0 spent");
  REQUIRE(job);
  CHECK(job->job_failed);
  CHECK(job->why == "--max-restarts 0 spent");
  CHECK_FALSE(ClosedWithout::parse("12 3"));
  CHECK_FALSE(Closed::parse("fail too few"));
}

TEST_CASE("an end record keeps its reason, spaces and all", "[records]") {
  EndRecord e;
  e.kind = EndKind::kReplace;
  e.target = 3;
  e.survivors = 2;
  e.wait = Millis(1500);
  e.release = 1;
  e.reason = "the leader  n0 stopped: why";
  const EndRecord back = EndRecord::parse(e.serialize());
  CHECK(back.kind == EndKind::kReplace);
  CHECK(back.wait == Millis(1500));
  CHECK(back.reason == e.reason);
  CHECK_FALSE(EndRecord::try_parse("explode 1 2 3 4 x"));
  const RoundTarget t = RoundTarget::parse(RoundTarget::of(e).serialize());
  CHECK(t.target == 3);
  CHECK(t.survivors == 2);
  CHECK(t.wait == Millis(1500));
}

TEST_CASE("the smaller records read back", "[records]") {
  const MasterAddress m = MasterAddress::parse(MasterAddress{"::1", 29500}.serialize());
  CHECK(m.host == "::1");
  CHECK(m.port == 29500);
  CHECK_THROWS_AS(MasterAddress::parse("host"), StoreError);

  const JobFinished f = JobFinished::parse(JobFinished{true, "no restarts left"}.serialize());
  CHECK(f.failed);
  CHECK(f.reason == "no restarts left");
  CHECK_FALSE(JobFinished::parse("ok every worker succeeded").failed);

  CHECK(parse_members(serialize_members({{"a", "10.0.0.1"}, {"b", "h2"}, {"c", ""}})) ==
        std::vector<std::string>{"a", "b", "c"});
  const auto list = parse_member_list(serialize_members({{"a", "10.0.0.1"}, {"c", ""}}));
  REQUIRE(list.size() == 2);
  CHECK(list[0].host == "10.0.0.1");
  CHECK(list[1].host.empty());
  CHECK(parse_member_list("old-agent-id")[0].node_id == "old-agent-id");
  CHECK(parse_members("").empty());

  CHECK(HeartbeatRecord::try_parse(HeartbeatRecord::at(1234).serialize())->unix_ms == 1234);
  CHECK(HeartbeatRecord::try_parse("1234 and more")->unix_ms == 1234);
  CHECK_FALSE(HeartbeatRecord::try_parse("soon"));
}

TEST_CASE("a heartbeat carries the node's progress and reads older beats", "[records]") {
  HeartbeatRecord b = HeartbeatRecord::at(1700000000123);
  b.step = 42;
  b.compute_us = 900;
  b.samples_per_s = 1536.5;
  b.rank_steps = {42, 41, -1};
  CHECK(b.serialize() == "1700000000123 42 900 1536.5 42,41,-1");
  const auto back = HeartbeatRecord::try_parse(b.serialize());
  REQUIRE(back);
  CHECK(back->step == 42);
  CHECK(back->compute_us == 900);
  CHECK(back->samples_per_s == 1536.5);
  CHECK(back->rank_steps == std::vector<int64_t>{42, 41, -1});

  // Before any worker steps; an older agent's three fields; garbage in the new ones.
  CHECK(HeartbeatRecord::at(5).serialize() == "5 -1 0 - -");
  const auto none = HeartbeatRecord::try_parse("5 -1 0 - -");
  REQUIRE(none);
  CHECK_FALSE(none->samples_per_s);
  CHECK(none->rank_steps.empty());
  const auto old = HeartbeatRecord::try_parse("5 7 100");
  REQUIRE(old);
  CHECK(old->step == 7);
  CHECK(old->rank_steps.empty());
  const auto odd = HeartbeatRecord::try_parse("5 7 100 fast 1,x,3");
  REQUIRE(odd);
  CHECK(odd->step == 7);
  CHECK_FALSE(odd->samples_per_s);
  CHECK(odd->rank_steps.empty());
}

TEST_CASE("a node's memory holdings mark what came from a peer", "[records]") {
  MemoryHoldings h{"10.0.0.7",
                   4242,
                   40,
                   {"step_000000040.r0of2", "step_000000040.r1of2"},
                   {"step_000000040.r1of2"},
                   7};
  CHECK(h.serialize() == "10.0.0.7 4242 40 7 step_000000040.r0of2 +step_000000040.r1of2");
  const auto back = MemoryHoldings::try_parse(h.serialize());
  REQUIRE(back);
  CHECK(back->snapshots == h.snapshots);
  CHECK(back->fetched == h.fetched);
  CHECK(back->round == 7);
  const auto none = MemoryHoldings::try_parse("10.0.0.7 4242 0 3");
  REQUIRE(none);
  CHECK(none->round == 3);
  CHECK(none->snapshots.empty());
  // As an agent before replication wrote it: every name its own, and no
  // round (0: older than any round's replicator).
  const auto old = MemoryHoldings::try_parse("10.0.0.7 4242 40 step_000000040.r0");
  REQUIRE(old);
  CHECK(old->fetched.empty());
  CHECK(old->round == 0);
  CHECK(old->snapshots == std::vector<std::string>{"step_000000040.r0"});
  CHECK_FALSE(MemoryHoldings::try_parse("10.0.0.7 0 40"));
  CHECK_FALSE(MemoryHoldings::try_parse("10.0.0.7 4242 40 7x step_000000040.r0"));
}

TEST_CASE("every key of a round lives under that round", "[records]") {
  CHECK(keys::join(7, 2) == "r/7/rec/2");
  CHECK(keys::placement(7, 1, 2) == "r/7/assign/1/2");
  CHECK(keys::end(7) == "r/7/end");
  CHECK(keys::survivor(7, 3) == "r/7/sv/3");
  CHECK(keys::stop_step(7) == "r/7/stop/step");
}
