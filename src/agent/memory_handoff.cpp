#include "agent/memory_handoff.hpp"

#include <thread>

#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "memory/snapshot.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {

namespace {

constexpr std::chrono::milliseconds kPoll{50};

}  // namespace

void serve_memory_handoff(rendezvous::Rendezvous& store, uint64_t round, int members,
                          const std::vector<std::string>& shards, std::chrono::milliseconds limit,
                          events::EventLog& events) {
  auto log = util::logger("agent");
  const bool serving = !shards.empty();
  try {
    store.offer_memory(round, serving);
  } catch (const Error& e) {
    log->warn("cannot offer this node's memory tier to the next round: {}", e.what());
    return;
  }
  if (!serving) return;
  log->info(
      "round {}: this node leaves with {} shard(s) of step {} that may be on no other node; "
      "serving its memory tier until the next round has restored (at most {} s)",
      round, shards.size(), memory::SnapshotName::parse(shards.front())->step,
      std::chrono::duration_cast<std::chrono::seconds>(limit).count());
  const auto t0 = std::chrono::steady_clock::now();
  std::string outcome = "timeout";
  size_t next = 0;  // the next round's members
  try {
    while (std::chrono::steady_clock::now() - t0 < limit) {
      if (store.job_finished()) {
        outcome = "job_finished";
        break;
      }
      if (const auto m = store.members_if_closed(round + 1)) {
        next = m->size();
        if (m->empty() || store.ended(round + 1)) {
          outcome = "round_ended";
          break;
        }
        if (store.memory_taken(round, 0) >= static_cast<int64_t>(next)) {
          outcome = "restored";
          break;
        }
      } else if (store.leaving(round) >= members && store.waiting_after(round) == 0) {
        outcome = "nobody_left";  // the whole job left (a preemption of every node)
        break;
      }
      std::this_thread::sleep_for(kPoll);
    }
  } catch (const Error& e) {
    log->warn("round {}: the memory handoff ends: {}", round, e.what());
    outcome = "store_error";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  events.record(events::type::kMemoryHandoff, {{"round", round},
                                               {"snapshots", shards},
                                               {"members", next},
                                               {"outcome", outcome},
                                               {"seconds", seconds}});
  if (outcome == "restored") {
    log->info("round {}: the {} member(s) of the next round restored; leaving", round, next);
  } else {
    log->warn("round {}: leaving without the next round's members all restored ({})", round,
              outcome);
  }
}

}  // namespace elasticrun::agent
