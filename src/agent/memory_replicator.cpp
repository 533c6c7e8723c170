#include "agent/memory_replicator.hpp"

#include <algorithm>
#include <cerrno>

#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "memory/peer.hpp"
#include "memory/replication_plan.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::agent {
namespace {

constexpr std::chrono::seconds kRetryAfter{2};

}  // namespace

MemoryReplicator::MemoryReplicator(Options options, memory::Tier& tier,
                                   rendezvous::Rendezvous& store, events::EventLog& events)
    : o_(std::move(options)), tier_(tier), store_(store), events_(events) {
  thread_ = util::start_quiet_thread([this] { run(); });
}

MemoryReplicator::~MemoryReplicator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MemoryReplicator::run() {
  auto log = util::logger("memory");
  for (;;) {
    try {
      pass();
    } catch (const Error& e) {
      // The store went (the job is ending, or its host was lost): the round
      // ends soon, and the next one makes a new replicator.
      log->debug("round {}: memory replication pass: {}", o_.round, e.what());
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, o_.interval, [&] { return stop_.load(); })) return;
  }
}

void MemoryReplicator::publish(const memory::Tier::Holding& h) {
  if (o_.port == 0 || h.snapshots == published_) return;
  store_.publish_memory({o_.host, o_.port, h.step, h.snapshots, h.fetched, o_.round});
  published_ = h.snapshots;
}

void MemoryReplicator::pass() {
  memory::Tier::Holding mine = tier_.scan();
  publish(mine);
  // Every member's holdings, read again only when some node published
  // (one key a pass, not one per member: a pass is twice a second on
  // every node).
  const int64_t generation = store_.memory_generation();
  if (generation != generation_) {
    all_ = store_.memory_of(o_.members);
    generation_ = generation;
    // Holdings of an earlier round are not known yet: that member may not
    // have removed what is newer than this round's restore (a copy of it
    // taken now would be stale once the job saves that step again, and
    // would count toward a safe step that is going away). Its replicator's
    // first pass publishes them for this round.
    for (auto& h : all_) {
      if (h && h->round < o_.round) h.reset();
    }
  }
  const auto& all = all_;
  if (all.size() != o_.members.size() || o_.me >= all.size()) return;

  // Older shards go once the newest safe step is on r+1 members (or on
  // every member, when there are fewer).
  const auto lists = [&] {
    std::vector<std::vector<std::string>> out;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i == o_.me) {
        out.push_back(mine.snapshots);
      } else if (all[i]) {
        out.push_back(all[i]->snapshots);
      }
    }
    return out;
  };
  const int copies = std::min<int>(o_.replicas + 1, static_cast<int>(o_.members.size()));
  const int64_t safe = memory::safe_step(lists(), copies);
  if (safe > pruned_before_ && safe > o_.restored_step) {
    if (tier_.remove_shards_before(safe) > 0) {
      mine = tier_.scan();
      publish(mine);
    }
    pruned_before_ = safe;
  }

  for (const size_t source : memory::replica_sources(all.size(), o_.me, o_.replicas)) {
    if (!all[source]) continue;
    const auto& from = *all[source];
    for (const auto& name : memory::to_replicate(
             memory::own_snapshots(from.snapshots, from.fetched), mine.snapshots)) {
      if (stop_) return;
      const auto now = std::chrono::steady_clock::now();
      if (auto it = retry_at_.find(name); it != retry_at_.end() && now < it->second) continue;
      // Older than what is safe already: it would be pruned at once.
      if (const auto n = memory::SnapshotName::parse(name); n && n->step < pruned_before_) continue;
      if (replicate(source, from, name)) {
        mine = tier_.scan();
        publish(mine);
      }
    }
  }
}

bool MemoryReplicator::replicate(size_t source, const rendezvous::MemoryHoldings& from,
                                 const std::string& name) {
  auto log = util::logger("memory");
  const auto t0 = std::chrono::steady_clock::now();
  memory::FetchOptions fo;
  fo.bytes_per_second = o_.bytes_per_second;
  fo.cancel = &stop_;
  fo.secret = o_.secret;
  const util::Status st = memory::fetch_snapshot(from.host, from.port, name, tier_, fo);
  if (!st) {
    retry_at_[name] = std::chrono::steady_clock::now() + kRetryAfter;
    if (stop_) return false;
    // ENOENT: the source pruned it meanwhile (a newer step is safe).
    if (st.err() == ENOENT) {
      log->debug("round {}: {}", o_.round, st.message());
    } else {
      log->warn("round {}: replicating: {}", o_.round, st.message());
    }
    return false;
  }
  retry_at_.erase(name);
  const auto m = tier_.manifest(name);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  events_.record(events::type::kMemoryReplicate, {{"round", o_.round},
                                                  {"source", o_.members[source]},
                                                  {"snapshot", name},
                                                  {"bytes", m ? m->bytes() : 0},
                                                  {"seconds", s}});
  log->debug("round {}: replicated {} from {} in {:.3f} s", o_.round, name, o_.members[source], s);
  return true;
}

}  // namespace elasticrun::agent
