// Where each node's shards are replicated while training runs, what a
// replica holder still has to fetch, and which step every rank's shards are
// safe at (docs/memory-tier.md). Pure: the agent's replicator reads the
// holdings from the store, fetches and prunes.
//
// Only sharded state is replicated: a state that is not sharded (DDP) is
// every rank's, and every node keeps its own snapshot of it already.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elasticrun::memory {

// Placement on a ring of the round's members in group-rank order: member i
// holds the replicas of members i-1, ..., i-r (mod n), so that member i's
// shards are on i+1, ..., i+r, never on i itself; r is capped at n-1.
// Returns the indices of the members whose shards `me` replicates, nearest
// first. A new round (new members) places afresh.
std::vector<size_t> replica_sources(size_t members, size_t me, int replicas);

// Of `source_own` (a source's own snapshots, not those it fetched), the
// shards of the newest step of each (world, rank) that are not in `mine`.
// Older steps are never fetched: the newest supersedes them once it is safe.
std::vector<std::string> to_replicate(const std::vector<std::string>& source_own,
                                      const std::vector<std::string>& mine);

// Of a node's holdings (`all`, of which it fetched `fetched`), the
// snapshots its own workers saved.
std::vector<std::string> own_snapshots(const std::vector<std::string>& all,
                                       const std::vector<std::string>& fetched);

// Of `own` (a node's own snapshots, not those it fetched), the shards of the
// newest step among its sharded ones: what a node that leaves at an agreed
// step saved last, and no replicator has copied yet. Empty when it holds
// no shards.
std::vector<std::string> newest_shards(const std::vector<std::string>& own);

// The newest step of a sharded state each of whose `world` ranks' shards is
// held by at least `copies` of the members (each member's holdings: own and
// fetched names); 0 when there is none. A step at least this new survives
// the loss of any copies-1 members, so older shards may go.
int64_t safe_step(const std::vector<std::vector<std::string>>& holdings, int copies);

}  // namespace elasticrun::memory
