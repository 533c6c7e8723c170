// The memory tier while a round's workers run (docs/memory-tier.md), on a
// thread of its own from construction to destruction:
//  - lists what the workers save in this node's tier as it appears,
//    checksumming each snapshot once (its manifest), and publishes the
//    node's holdings in the store, so that peers can replicate them and a
//    round that closes after a loss sees them;
//  - replicates the sharded state of the members placed on this node
//    (memory/replication_plan.hpp: a ring, r members before this one) into
//    its tier, at most --memory-replication-rate bytes a second, each file
//    checked against the holder's manifest before the replica is published;
//  - removes the shards older than the newest step that every rank's shards
//    are on r+1 members at (the SDK leaves them to it under replication).
// The agent's main thread touches the tier only when no replicator runs:
// it makes one after a round's restore and destroys it when the attempt
// ends, and the destructor cuts a transfer under way (nothing of it stays).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "events/event_log.hpp"
#include "memory/tier.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::agent {

class MemoryReplicator {
 public:
  struct Options {
    uint64_t round = 0;
    std::vector<std::string> members;  // the round's node ids, in group-rank order
    size_t me = 0;                     // this node's index in `members`
    int replicas = 1;                  // r
    // The step the round's restore chose: nothing is pruned until a newer
    // one is safe (the workers load it, or an older one every node has,
    // while the replicator starts).
    int64_t restored_step = 0;
    uint64_t bytes_per_second = 0;  // 0: no cap
    // Where this node's peer server is; port 0: it has none, so nothing is
    // published (peers cannot fetch from it), but pruning goes on.
    std::string host;
    int port = 0;
    std::chrono::milliseconds interval{500};  // between passes
    std::string secret;                       // the job secret, for peers' servers
  };

  // `store`: a connection only this replicator uses while it lives.
  // `store`, `tier` and `events` must outlive it.
  MemoryReplicator(Options options, memory::Tier& tier, rendezvous::Rendezvous& store,
                   events::EventLog& events);
  ~MemoryReplicator();
  MemoryReplicator(const MemoryReplicator&) = delete;
  MemoryReplicator& operator=(const MemoryReplicator&) = delete;

 private:
  void run();
  void pass();
  void publish(const memory::Tier::Holding& h);
  // Fetches `name` from member `source`; true when it is in the tier now.
  bool replicate(size_t source, const rendezvous::MemoryHoldings& from, const std::string& name);

  const Options o_;
  memory::Tier& tier_;
  rendezvous::Rendezvous& store_;  // this thread's while it runs
  events::EventLog& events_;
  std::vector<std::string> published_;  // the last holdings published
  // The store's memory generation when the members' holdings were last
  // read, and those holdings: read again only once it moved.
  int64_t generation_ = -1;
  std::vector<std::optional<rendezvous::MemoryHoldings>> all_;
  int64_t pruned_before_ = 0;
  // A snapshot that could not be fetched is tried again after a while.
  std::map<std::string, std::chrono::steady_clock::time_point> retry_at_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace elasticrun::agent
