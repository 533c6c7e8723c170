// The memory tier (src/memory): snapshot names and manifests, the tier's
// adoption of what workers wrote, and fetches between two tiers over real
// loopback HTTP, including a copy that changed in memory after its
// manifest was made and a peer that lies about a file's name.
#include <catch2/catch.hpp>
#include <fstream>

#include "memory/peer.hpp"
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
    CHECK_FALSE(fetch_snapshot("127.0.0.1", 1, name, *t, std::chrono::seconds(2)));
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
