// A graceful leave under the memory tier (docs/memory-tier.md, "A graceful
// leave"). The job stops at an agreed step and every rank saves it into its
// node's tier, so the leaving node's shards of that step are on no other
// node: the replicators had no time to copy them. The leaver keeps serving
// its tier until every member of the next round has restored, and they
// count it among the holders they restore from (Rendezvous::offer_memory,
// memory_offers, memory_taken: the leaver offers, the members take).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "events/event_log.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::agent {

// On the leaver, once its workers are gone and its holdings are published:
// offers its tier to the round after `round` (of `members` nodes) when
// `shards` (its own shards of its newest step, replication_plan's
// newest_shards) is not empty, and then waits until every member of that
// round has restored, that round ended, the job finished, every member of
// `round` left with no spare waiting, or `limit` passed (a
// second signal ends the agent at once: its handlers are gone). Says no
// offer otherwise, so that nobody waits for it. Never throws: a store that
// is gone ends the wait.
void serve_memory_handoff(rendezvous::Rendezvous& store, uint64_t round, int members,
                          const std::vector<std::string>& shards, std::chrono::milliseconds limit,
                          events::EventLog& events);

}  // namespace elasticrun::agent
