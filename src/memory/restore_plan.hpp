// Which snapshots a node fetches before its workers start (docs/memory-tier.md):
// from what every member of the round holds, the newest step the job can
// restore from memory, and the snapshots of it this node lacks. Pure: the
// agent reads the holdings from the store and does the fetches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elasticrun::memory {

struct PeerHolding {
  std::string host;
  int port = 0;
  std::vector<std::string> snapshots;  // names (snapshot.hpp)
};

struct RestorePlan {
  int64_t step = 0;  // 0: nothing in memory restores the job
  // What to fetch, each with the indices (into the holdings given) of the
  // members that hold it, in order.
  struct Fetch {
    std::string snapshot;
    std::vector<size_t> holders;
  };
  std::vector<Fetch> fetches;
  // Newer steps passed over: their shards are not all held by the members
  // ("step 40: ranks 2, 3 of 4 are on no member"), for the log.
  std::vector<std::string> incomplete;
};

// A step restores from one snapshot of a state that is not sharded (any
// rank's), or from all `world` ranks' shards of a sharded one. `mine`:
// what this node holds.
RestorePlan plan_restore(const std::vector<PeerHolding>& members,
                         const std::vector<std::string>& mine);

}  // namespace elasticrun::memory
