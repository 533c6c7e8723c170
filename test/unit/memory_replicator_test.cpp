// The memory tier's replicator (agent/memory_replicator) against a real
// store and a real peer server: what it copies, and from whose holdings.
#include "agent/memory_replicator.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "memory/peer.hpp"
#include "memory/tier.hpp"
#include "server_fixture.hpp"
#include "temp_dir.hpp"

namespace elasticrun::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

rendezvous::RendezvousConfig config_for(const test::ServerFixture& s, const std::string& node) {
  rendezvous::RendezvousConfig c;
  c.store_host = "127.0.0.1";
  c.store_port = s.port();
  c.run_id = "test";
  c.node_id = node;
  c.host = "127.0.0.1";
  c.store_timeout = 10s;
  return c;
}

// What the SDK publishes for one rank's shards: a DCP directory.
void write_shards(const memory::Tier& t, int64_t step, int rank, int world) {
  const fs::path dir = t.path() / memory::SnapshotName{step, rank, world}.str();
  fs::create_directory(dir);
  std::ofstream(dir / "__0_0.distcp", std::ios::binary) << "rank " << rank << " at " << step;
  std::ofstream(dir / ".metadata", std::ios::binary) << "meta";
}

// Whether `tier` comes to hold `name` within `patience`.
bool comes_to_hold(const memory::Tier& tier, const std::string& name,
                   std::chrono::milliseconds patience) {
  const auto until = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < until) {
    if (tier.holds(name)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return tier.holds(name);
}

}  // namespace

TEST_CASE("a round's replicator copies from a member's holdings of that round only",
          "[memory][replicator]") {
  test::ServerFixture store;
  test::TempDir a_base, b_base;
  auto a = memory::Tier::create(a_base.path(), std::nullopt, memory::ShardPruning::kReplicator);
  auto b = memory::Tier::create(b_base.path(), std::nullopt, memory::ShardPruning::kReplicator);
  memory::PeerServer b_server("127.0.0.1", *b);
  // node1 holds its shards of step 12, which it saved in round 1; round 2
  // restores an older step, and node1 has not removed step 12 yet.
  write_shards(*b, 12, 1, 2);
  const memory::Tier::Holding held = b->adopt();
  const std::string name = memory::SnapshotName{12, 1, 2}.str();
  REQUIRE(held.snapshots == std::vector<std::string>{name});
  rendezvous::Rendezvous node1(config_for(store, "node1"));
  node1.publish_memory({"127.0.0.1", b_server.port(), held.step, held.snapshots, {}, 1});

  rendezvous::Rendezvous replicator_store(config_for(store, "node0"));
  events::EventLog events;
  MemoryReplicator::Options o;
  o.round = 2;
  o.members = {"node0", "node1"};
  o.me = 0;
  o.replicas = 1;
  o.interval = 20ms;
  MemoryReplicator replicator(o, *a, replicator_store, events);

  // Holdings of round 1 are not known in round 2: nothing is copied, while
  // many passes go by.
  REQUIRE_FALSE(comes_to_hold(*a, name, 500ms));
  // node1 publishes for round 2 (its replicator's first pass does): the
  // shards are copied.
  node1.publish_memory({"127.0.0.1", b_server.port(), held.step, held.snapshots, {}, 2});
  REQUIRE(comes_to_hold(*a, name, test::kPatience));
}

}  // namespace elasticrun::agent
