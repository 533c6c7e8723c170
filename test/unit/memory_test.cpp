// The memory tier (src/memory): snapshot names and manifests, the tier's
// adoption of what workers wrote, and fetches between two tiers over real
// loopback HTTP, including a copy that changed in memory after its
// manifest was made and a peer that lies about a file's name; the
// replication's placement, what it fetches, when shards are safe to prune,
// and a replication held to its rate or cut midway.
#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "memory/peer.hpp"
#include "memory/replication_plan.hpp"
#include "memory/restore_plan.hpp"
#include "memory/snapshot.hpp"
#include "memory/tier.hpp"
#include "temp_dir.hpp"

using namespace elasticrun::memory;
using elasticrun::test::TempDir;
namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What the SDK publishes: a DCP directory with its .metadata.
void write_snapshot(const Tier& t, int64_t step, int rank, const std::string& payload,
                    std::optional<int> world = std::nullopt) {
  const fs::path dir = t.path() / SnapshotName{step, rank, world}.str();
  fs::create_directory(dir);
  write_file(dir / "__0_0.distcp", payload);
  write_file(dir / ".metadata", "meta of " + std::to_string(step));
}

}  // namespace

TEST_CASE("snapshot names are the SDK's step_<9 digits>.r<rank>[of<world>]", "[memory]") {
  CHECK(SnapshotName{42, 3, std::nullopt}.str() == "step_000000042.r3");
  CHECK(SnapshotName{42, 3, 8}.str() == "step_000000042.r3of8");
  const auto n = SnapshotName::parse("step_000000042.r3");
  REQUIRE(n);
  CHECK(n->step == 42);
  CHECK(n->rank == 3);
  CHECK_FALSE(n->world);
  const auto s = SnapshotName::parse("step_000000042.r3of8");
  REQUIRE(s);
  CHECK(s->rank == 3);
  CHECK(s->world == 8);
  CHECK_FALSE(SnapshotName::parse("step_000000042.r8of8"));  // no such rank
  CHECK_FALSE(SnapshotName::parse("step_000000042.r3of"));
  CHECK_FALSE(SnapshotName::parse("step_000000042.r3of0"));
  CHECK_FALSE(SnapshotName::parse("step_000000042.r3.partial"));
  CHECK_FALSE(SnapshotName::parse("step_42.r3"));
  CHECK_FALSE(SnapshotName::parse("step_00000004x.r3"));
  CHECK_FALSE(SnapshotName::parse("step_000000042.r"));
  CHECK_FALSE(SnapshotName::parse("step_000000042.r-1"));
}

TEST_CASE("a manifest reads back as written and refuses names that leave its directory",
          "[memory]") {
  Manifest m{"step_000000007.r0", {{".metadata", 12, 0xdeadbeef}, {"__0_0.distcp", 1 << 20, 1}}};
  auto back = Manifest::parse(m.serialize());
  REQUIRE(back);
  CHECK(back.value().serialize() == m.serialize());
  CHECK(back.value().bytes() == 12 + (1 << 20));
  CHECK_FALSE(Manifest::parse(""));
  CHECK_FALSE(Manifest::parse("elasticrun-manifest 2 step_000000007.r0\n1 00000000 a\n"));
  CHECK_FALSE(Manifest::parse("elasticrun-manifest 1 step_000000007.r0\n"));  // no file
  CHECK_FALSE(Manifest::parse("elasticrun-manifest 1 step_000000007.r0\n1 00000000 ../x\n"));
  CHECK_FALSE(Manifest::parse("elasticrun-manifest 1 step_000000007.r0\n1 00000000 ..\n"));
  CHECK_FALSE(Manifest::parse("elasticrun-manifest 1 step_000000007.r0\n1 0000000 a\n"));
  CHECK_FALSE(Manifest::parse("elasticrun-manifest 1 ../../etc\n1 00000000 a\n"));
}

TEST_CASE(
    "the tier keeps the newest step of a whole state, drops what is half-written, and goes "
    "with its owner",
    "[memory]") {
  TempDir base;
  fs::path where;
  {
    auto t = Tier::create(base.path(), std::nullopt);
    where = t->path();
    CHECK(t->adopt().snapshots.empty());
    write_snapshot(*t, 8, 0, "old");
    write_snapshot(*t, 12, 0, "new");
    write_snapshot(*t, 12, 1, "new too");
    fs::create_directory(t->path() / "step_000000016.r0.partial");  // a worker died writing it
    fs::create_directory(t->path() / "step_000000020.r0");          // no .metadata: not published
    const Tier::Holding h = t->adopt();
    CHECK(h.step == 12);
    CHECK(h.snapshots == std::vector<std::string>{"step_000000012.r0", "step_000000012.r1"});
    CHECK_FALSE(fs::exists(t->path() / "step_000000008.r0"));
    CHECK_FALSE(fs::exists(t->path() / "step_000000016.r0.partial"));
    CHECK_FALSE(fs::exists(t->path() / "step_000000020.r0"));
    const auto m = t->manifest("step_000000012.r0");
    REQUIRE(m);
    CHECK(m->files.size() == 2);
    CHECK(m->bytes() == 3 + std::string("meta of 12").size());
  }
  CHECK_FALSE(fs::exists(where));
}

TEST_CASE("with the job secret, a peer serves only fetches that prove it", "[memory][auth]") {
  TempDir a_base, b_base;
  auto holder = Tier::create(a_base.path(), std::nullopt);
  const std::string payload(1 << 20, 'x');
  write_snapshot(*holder, 40, 0, payload);
  REQUIRE(holder->adopt().step == 40);
  const std::string secret = "the-job-secret-of-this-test";
  PeerServer server("127.0.0.1", *holder, secret);
  const std::string name = "step_000000040.r0";
  auto t = Tier::create(b_base.path(), std::nullopt);

  const auto without = fetch_snapshot("127.0.0.1", server.port(), name, *t);
  REQUIRE_FALSE(without);
  CHECK_THAT(without.message(),
             Catch::Contains("the peer refused") && Catch::Contains("asks for the job secret"));
  const auto wrong =
      fetch_snapshot("127.0.0.1", server.port(), name, *t, {.secret = "another-job's-secret"});
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.message(), Catch::Contains("wrong MAC"));
  CHECK(fs::is_empty(t->path()));

  REQUIRE(fetch_snapshot("127.0.0.1", server.port(), name, *t, {.secret = secret}));
  CHECK(read_file(t->path() / name / "__0_0.distcp") == payload);

  // A fetcher holding a secret refuses a peer that asks for none.
  TempDir c_base;
  auto open_holder = Tier::create(c_base.path(), std::nullopt);
  write_snapshot(*open_holder, 41, 0, payload);
  REQUIRE(open_holder->adopt().step == 41);
  PeerServer open_server("127.0.0.1", *open_holder);
  const auto st =
      fetch_snapshot("127.0.0.1", open_server.port(), "step_000000041.r0", *t, {.secret = secret});
  REQUIRE_FALSE(st);
  CHECK_THAT(st.message(), Catch::Contains("hands out no nonce"));
}

TEST_CASE("a peer's snapshot arrives whole, and a corrupt or oversized one never lands",
          "[memory]") {
  TempDir a_base, b_base;
  auto holder = Tier::create(a_base.path(), std::nullopt);
  const std::string payload(3 << 20, 'x');  // several chunks
  write_snapshot(*holder, 30, 0, payload);
  REQUIRE(holder->adopt().step == 30);
  PeerServer server("127.0.0.1", *holder);
  const std::string name = "step_000000030.r0";

  SECTION("whole, checksummed, published") {
    auto t = Tier::create(b_base.path(), std::nullopt);
    const auto st = fetch_snapshot("127.0.0.1", server.port(), name, *t);
    REQUIRE(st);
    CHECK(read_file(t->path() / name / "__0_0.distcp") == payload);
    CHECK(t->holds(name));
    CHECK(t->adopt().snapshots == std::vector<std::string>{name});
  }
  SECTION("changed in the holder's memory after its manifest was made: refused") {
    write_file(holder->file(name, "__0_0.distcp"), std::string(3 << 20, 'y'));
    auto t = Tier::create(b_base.path(), std::nullopt);
    const auto st = fetch_snapshot("127.0.0.1", server.port(), name, *t);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.message(), Catch::Contains("corrupt") && Catch::Contains("127.0.0.1"));
    CHECK_FALSE(t->holds(name));
    CHECK(fs::is_empty(t->path()));  // nothing half-fetched is left
  }
  SECTION("over the tier's limit: refused before a byte is written") {
    auto t = Tier::create(b_base.path(), uint64_t{1 << 20});
    const auto st = fetch_snapshot("127.0.0.1", server.port(), name, *t);
    REQUIRE_FALSE(st);
    CHECK_THAT(st.message(), Catch::Contains("at most 1048576 bytes"));
    CHECK(fs::is_empty(t->path()));
  }
  SECTION("a snapshot the peer does not hold, and a peer that is not there") {
    auto t = Tier::create(b_base.path(), std::nullopt);
    CHECK_THAT(fetch_snapshot("127.0.0.1", server.port(), "step_000000031.r0", *t).message(),
               Catch::Contains("does not hold it"));
    CHECK_FALSE(fetch_snapshot("127.0.0.1", 1, name, *t, {.timeout = std::chrono::seconds(2)}));
  }
}

TEST_CASE(
    "the tier keeps each rank's newest shards, so a save cut short leaves the last whole "
    "set",
    "[memory]") {
  TempDir base;
  auto t = Tier::create(base.path(), std::nullopt);
  // Ranks 0 and 1 of 2 on this node saved steps 4 and 8; rank 1 died
  // saving 12, so the SDK removed no shards of 8.
  for (int rank : {0, 1}) {
    write_snapshot(*t, 4, rank, "old", 2);
    write_snapshot(*t, 8, rank, "kept", 2);
  }
  write_snapshot(*t, 12, 0, "c", 2);
  fs::create_directory(t->path() / "step_000000012.r1of2.partial");
  const Tier::Holding h = t->adopt();
  CHECK(h.step == 12);
  CHECK(h.snapshots == std::vector<std::string>{"step_000000004.r1of2", "step_000000008.r0of2",
                                                "step_000000008.r1of2", "step_000000012.r0of2"});
}

TEST_CASE(
    "under replication the tier's adoption keeps a rank's older shards, for the replicator to "
    "prune",
    "[memory]") {
  TempDir base;
  auto t = Tier::create(base.path(), std::nullopt, ShardPruning::kReplicator);
  // Step 4 is the newest on r+1 nodes; 8 and 12 were saved faster than the
  // replicator copied them. A save cut short still leaves nothing.
  for (int64_t step : {4, 8, 12}) write_snapshot(*t, step, 0, "rank 0", 4);
  fs::create_directory(t->path() / "step_000000016.r0of4.partial");
  CHECK(t->adopt().snapshots == std::vector<std::string>{"step_000000004.r0of4",
                                                         "step_000000008.r0of4",
                                                         "step_000000012.r0of4"});
  CHECK_FALSE(fs::exists(t->path() / "step_000000016.r0of4.partial"));
  // What the replicator prunes once a newer step is safe, it prunes.
  CHECK(t->remove_shards_before(12) == 2);
  CHECK(t->adopt().snapshots == std::vector<std::string>{"step_000000012.r0of4"});
}

TEST_CASE(
    "after a node's loss the survivors' tiers still restore the newest step replicated before "
    "it, however many saves came since",
    "[memory]") {
  // Four nodes, one rank each, r = 1: node i holds the replicas of node
  // i-1's shards. Every rank's shards of step 4 are on two nodes; steps 8
  // and 12 were saved by every rank but not replicated yet when node 3 was
  // killed, so rank 3's are on no survivor, and rank 2's step 4 only on
  // node 2 (its replica was on node 3).
  std::vector<TempDir> bases(3);
  std::vector<std::unique_ptr<Tier>> survivors;
  for (int node = 0; node < 3; ++node) {
    auto t = Tier::create(bases[node].path(), std::nullopt, ShardPruning::kReplicator);
    for (int64_t step : {4, 8, 12}) write_snapshot(*t, step, node, "own", 4);
    write_snapshot(*t, 4, (node + 3) % 4, "replica", 4);
    survivors.push_back(std::move(t));
  }
  // Their workers are gone: each agent adopts what is in its tier and
  // publishes it, and the next round plans its restore from that.
  std::vector<PeerHolding> members;
  for (auto& t : survivors) members.push_back({"127.0.0.1", 1, t->adopt().snapshots});
  const RestorePlan plan = plan_restore(members, members[0].snapshots);
  CHECK(plan.step == 4);
  REQUIRE(plan.fetches.size() == 2);  // node 0 holds ranks 0 and 3
  CHECK(plan.fetches[0].snapshot == "step_000000004.r1of4");
  CHECK(plan.fetches[1].snapshot == "step_000000004.r2of4");
  CHECK(plan.fetches[1].holders == std::vector<size_t>{2});
  CHECK(plan.incomplete == std::vector<std::string>{"step 12: rank(s) 3 of 4 are on no member",
                                                    "step 8: rank(s) 3 of 4 are on no member"});
}

TEST_CASE("a restore plan takes the newest step the members can restore together", "[memory]") {
  const auto plan = [](std::vector<PeerHolding> members, std::vector<std::string> mine) {
    return plan_restore(members, mine);
  };
  SECTION("a whole state: one snapshot of the newest step, from whoever holds it") {
    const auto p = plan({{"a", 1, {"step_000000010.r0"}},
                         {"b", 2, {"step_000000012.r1"}},
                         {"c", 3, {"step_000000012.r1"}}},
                        {});
    CHECK(p.step == 12);
    REQUIRE(p.fetches.size() == 1);
    CHECK(p.fetches[0].snapshot == "step_000000012.r1");
    CHECK(p.fetches[0].holders == std::vector<size_t>{1, 2});
  }
  SECTION("this node holds one of that step already (another rank's): nothing to fetch") {
    const auto p = plan({{"a", 1, {"step_000000012.r0"}}, {"b", 2, {"step_000000012.r1"}}},
                        {"step_000000012.r1"});
    CHECK(p.step == 12);
    CHECK(p.fetches.empty());
  }
  SECTION("sharded: every rank's shards this node lacks") {
    const auto p = plan({{"a", 1, {"step_000000012.r0of3", "step_000000012.r1of3"}},
                         {"b", 2, {"step_000000012.r2of3"}}},
                        {"step_000000012.r2of3"});
    CHECK(p.step == 12);
    REQUIRE(p.fetches.size() == 2);
    CHECK(p.fetches[0].snapshot == "step_000000012.r0of3");
    CHECK(p.fetches[1].snapshot == "step_000000012.r1of3");
    CHECK(p.fetches[1].holders == std::vector<size_t>{0});
  }
  SECTION("sharded with a rank's shards lost: the newest complete older step, said why") {
    const auto p = plan({{"a", 1, {"step_000000008.r0of2", "step_000000012.r0of2"}},
                         {"b", 2, {"step_000000008.r1of2"}}},
                        {});
    CHECK(p.step == 8);
    CHECK(p.fetches.size() == 2);
    REQUIRE(p.incomplete.size() == 1);
    CHECK_THAT(p.incomplete[0], Catch::Contains("step 12: rank(s) 1 of 2 are on no member"));
  }
  SECTION("nothing anywhere, or nothing complete") {
    CHECK(plan({{"a", 1, {}}}, {}).step == 0);
    CHECK(plan({{"a", 1, {"step_000000012.r0of2"}}}, {}).step == 0);
  }
}

TEST_CASE("replicas go on the ring's next members, never on the node itself", "[memory]") {
  CHECK(replica_sources(3, 0, 1) == std::vector<size_t>{2});
  CHECK(replica_sources(3, 1, 1) == std::vector<size_t>{0});
  CHECK(replica_sources(4, 1, 2) == std::vector<size_t>{0, 3});
  CHECK(replica_sources(3, 0, 5) == std::vector<size_t>{2, 1});  // at most n-1
  CHECK(replica_sources(1, 0, 1).empty());
  CHECK(replica_sources(3, 0, 0).empty());
  // Every member's shards are held by exactly r others.
  for (size_t n : {2u, 3u, 5u}) {
    for (int r = 1; r < static_cast<int>(n); ++r) {
      std::vector<int> held(n, 0);
      for (size_t me = 0; me < n; ++me) {
        for (size_t src : replica_sources(n, me, r)) {
          CHECK(src != me);
          ++held[src];
        }
      }
      for (int h : held) CHECK(h == r);
    }
  }
}

TEST_CASE("a replica holder fetches each rank's newest shards it lacks, of sharded state only",
          "[memory]") {
  const std::vector<std::string> source{"step_000000010.r0of4", "step_000000010.r1of4",
                                        "step_000000020.r0of4", "step_000000020.r1of4",
                                        "step_000000020.r0"};
  CHECK(to_replicate(source, {}) ==
        std::vector<std::string>{"step_000000020.r0of4", "step_000000020.r1of4"});
  CHECK(to_replicate(source, {"step_000000020.r0of4"}) ==
        std::vector<std::string>{"step_000000020.r1of4"});
  CHECK(to_replicate({"step_000000020.r0"}, {}).empty());  // every node keeps its own
}

TEST_CASE("a node that leaves hands off its own shards of its newest step", "[memory]") {
  // Its rank 1 of world 4 at step 20 and its rank 1 of world 3 at step 28
  // (a resize's agreed step): only the newer.
  CHECK(newest_shards({"step_000000020.r1of4", "step_000000028.r1of3", "step_000000028.r2of3"}) ==
        std::vector<std::string>{"step_000000028.r1of3", "step_000000028.r2of3"});
  CHECK(newest_shards({"step_000000040.r0"}).empty());  // whole state: every node has its own
  CHECK(newest_shards({}).empty());
}

TEST_CASE("a step is safe once every rank's shards are on enough members", "[memory]") {
  // Three members, one rank each; r = 1: two copies of each rank's shards.
  const std::vector<std::vector<std::string>> before{
      {"step_000000010.r0of3", "step_000000010.r2of3", "step_000000020.r0of3"},
      {"step_000000010.r1of3", "step_000000010.r0of3", "step_000000020.r1of3",
       "step_000000020.r0of3"},
      {"step_000000010.r2of3", "step_000000010.r1of3", "step_000000020.r2of3"}};
  CHECK(safe_step(before, 2) == 10);  // rank 1's and 2's shards of 20 are on one member
  CHECK(safe_step(before, 1) == 20);
  CHECK(safe_step(before, 3) == 0);
  auto after = before;
  after[0].push_back("step_000000020.r2of3");
  after[2].push_back("step_000000020.r1of3");
  CHECK(safe_step(after, 2) == 20);
  // A member listing a name twice is one copy.
  CHECK(safe_step({{"step_000000005.r0of1", "step_000000005.r0of1"}}, 2) == 0);
  CHECK(safe_step({}, 1) == 0);
}

TEST_CASE(
    "while workers run, the tier lists what they published, leaves what they write, and "
    "prunes shards older than a safe step",
    "[memory]") {
  TempDir base;
  auto t = Tier::create(base.path(), std::nullopt);
  write_snapshot(*t, 10, 0, "ten", 2);
  write_snapshot(*t, 20, 0, "twenty", 2);
  write_snapshot(*t, 20, 0, "whole");
  fs::create_directory(t->path() / "step_000000030.r0of2.partial");  // being written
  Tier::Holding h = t->scan();
  CHECK(h.step == 20);
  CHECK(h.snapshots == std::vector<std::string>{"step_000000010.r0of2", "step_000000020.r0",
                                                "step_000000020.r0of2"});
  CHECK(h.fetched.empty());
  CHECK(fs::exists(t->path() / "step_000000030.r0of2.partial"));
  REQUIRE(t->manifest("step_000000010.r0of2"));
  // A worker pruned one: forgotten.
  fs::remove_all(t->path() / "step_000000010.r0of2");
  CHECK(t->scan().snapshots.size() == 2);
  CHECK_FALSE(t->manifest("step_000000010.r0of2"));
  write_snapshot(*t, 15, 1, "fifteen", 2);
  t->scan();
  CHECK(t->remove_shards_before(20) == 1);
  CHECK_FALSE(fs::exists(t->path() / "step_000000015.r1of2"));
  CHECK(t->scan().snapshots ==
        std::vector<std::string>{"step_000000020.r0", "step_000000020.r0of2"});
  CHECK(fs::exists(t->path() / "step_000000030.r0of2.partial"));
  // A restore of step 12: what is newer belongs to steps trained again.
  write_snapshot(*t, 12, 0, "twelve", 2);
  t->scan();
  CHECK(t->remove_newer_than(12) == 2);
  CHECK(t->scan().snapshots == std::vector<std::string>{"step_000000012.r0of2"});
}

TEST_CASE(
    "a lost node's replicated shards outlive this node's newer ones of a step that node never "
    "finished",
    "[memory]") {
  TempDir a_base, b_base;
  auto lost = Tier::create(a_base.path(), std::nullopt);
  write_snapshot(*lost, 20, 1, "rank 1 at 20", 2);
  REQUIRE(lost->adopt().step == 20);
  PeerServer server("127.0.0.1", *lost);
  auto t = Tier::create(b_base.path(), std::nullopt);
  REQUIRE(fetch_snapshot("127.0.0.1", server.port(), "step_000000020.r1of2", *t));
  write_snapshot(*t, 20, 0, "rank 0 at 20", 2);
  write_snapshot(*t, 30, 0, "rank 0 at 30; rank 1 never wrote 30", 2);
  const Tier::Holding h = t->adopt();
  CHECK(h.snapshots == std::vector<std::string>{"step_000000020.r0of2", "step_000000020.r1of2",
                                                "step_000000030.r0of2"});
  CHECK(h.fetched == std::vector<std::string>{"step_000000020.r1of2"});
  CHECK(t->fetched("step_000000020.r1of2"));
  CHECK_FALSE(t->fetched("step_000000020.r0of2"));

  // The replica's bytes change in this node's memory: checked before a
  // restore, it is removed rather than loaded.
  REQUIRE(t->verify("step_000000020.r1of2"));
  write_file(t->file("step_000000020.r1of2", "__0_0.distcp"), "rank 1 at 2O");
  const auto st = t->verify("step_000000020.r1of2");
  REQUIRE_FALSE(st);
  CHECK_THAT(st.message(), Catch::Contains("__0_0.distcp changed in memory"));
  CHECK_FALSE(t->holds("step_000000020.r1of2"));
  CHECK_FALSE(fs::exists(t->path() / "step_000000020.r1of2"));
}

TEST_CASE("a replication is held to its rate, and one cut midway leaves nothing", "[memory]") {
  TempDir a_base, b_base;
  auto holder = Tier::create(a_base.path(), std::nullopt);
  const std::string payload(12 << 20, 'r');  // three chunks of 4 MiB
  write_snapshot(*holder, 40, 0, payload, 2);
  REQUIRE(holder->adopt().step == 40);
  PeerServer server("127.0.0.1", *holder);
  const std::string name = "step_000000040.r0of2";
  auto t = Tier::create(b_base.path(), std::nullopt);
  SECTION("at 16 MiB/s, 12 MiB take at least the time the rate allows for the first 8") {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(fetch_snapshot("127.0.0.1", server.port(), name, *t,
                           {.bytes_per_second = uint64_t{16} << 20}));
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(500));
    CHECK(read_file(t->path() / name / "__0_0.distcp") == payload);
  }
  SECTION("cancelled while it runs: refused, and no part of it stays") {
    std::atomic<bool> cancel{false};
    std::thread cutter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      cancel = true;
    });
    const auto st = fetch_snapshot("127.0.0.1", server.port(), name, *t,
                                   {.bytes_per_second = uint64_t{4} << 20, .cancel = &cancel});
    cutter.join();
    REQUIRE_FALSE(st);
    CHECK_THAT(st.message(), Catch::Contains("stopped"));
    CHECK_FALSE(t->holds(name));
    CHECK(fs::is_empty(t->path()));
    CHECK(t->scan().snapshots.empty());
  }
}
