// The node's memory tier (docs/memory-tier.md): a directory in shared
// memory (tmpfs) that the agent creates, names to its workers
// (ELASTICRUN_MEMORY_DIR) and removes when it ends, so that what a worker
// saved there outlives the worker but not the agent. Workers write
// snapshots into it (snapshot.hpp); the agent adopts them when the workers
// are gone, keeping the newest step's only, and checksums each file once
// (the manifest), so that a copy that changed in memory since, or on the
// way to a peer, is refused where it arrives.
//
// Threads: the agent's main thread adopts and installs between attempts;
// while the workers run, its replicator (agent/memory_replicator.hpp) scans,
// installs replicas and prunes; never both at once. The peer server's
// threads (peer.hpp) read manifests and files at any time. The manifests
// are under a lock; files are read by path, and a snapshot removed while a
// peer reads it ends that peer's fetch in an error, never in a wrong copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memory/snapshot.hpp"
#include "util/result.hpp"

namespace elasticrun::memory {

// What the file system of `dir` has free for this process (UINT64_MAX when
// it cannot say).
uint64_t free_bytes(const std::filesystem::path& dir);

// Who removes a rank's older shards of a sharded state (docs/memory-tier.md,
// "What is kept"). kSdk: the SDK, once every rank of the save wrote the
// newer ones, so a node holds at most two of a rank (the older whole).
// kReplicator: the agent's replicator alone (agent/memory_replicator.hpp),
// once a newer step is on r+1 nodes; until then the older ones are the only
// step a node's loss can restore from, however many newer saves came since.
enum class ShardPruning { kSdk, kReplicator };

class Tier {
 public:
  // Creates a fresh directory under `base` (/dev/shm where it is writable:
  // Tier::default_base). `limit`: the most bytes it may hold; the space free
  // there now bounds it too. `pruning`: whether the agent replicates the
  // shards (then only its replicator removes them). Throws elasticrun::Error
  // when it cannot.
  static std::unique_ptr<Tier> create(const std::filesystem::path& base,
                                      std::optional<uint64_t> limit,
                                      ShardPruning pruning = ShardPruning::kSdk);
  // /dev/shm when this process can write there, else `fallback`.
  static std::filesystem::path default_base(const std::filesystem::path& fallback);
  ~Tier();  // removes the directory and everything in it
  Tier(const Tier&) = delete;
  Tier& operator=(const Tier&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint64_t limit() const { return limit_; }

  // With no worker running: removes what is half-written and what newer
  // snapshots supersede, and checksums what it keeps that has no manifest
  // yet. A snapshot of a state that is not sharded is superseded by any
  // newer one of such a state; a fetched one by anything newer. A rank's
  // shards, with ShardPruning::kSdk, by two newer ones of that rank (the
  // SDK removes the older once every rank wrote the newer: two are here
  // only after a save that some rank never finished, whose set is not
  // whole), a fetched rank's shards as this node's own (a replica of a lost
  // node's shards must outlive this node's newer shards of a step whose set
  // that node never finished); with ShardPruning::kReplicator, never: the
  // newest step whose shards are on r+1 nodes may be older than several
  // saves not replicated yet, and it is the one the survivors of a node's
  // loss restore. Returns the names it keeps, and the newest step among
  // them (0 for none).
  struct Holding {
    int64_t step = 0;
    std::vector<std::string> snapshots;  // sorted
    std::vector<std::string> fetched;    // those of them that came from a peer
  };
  Holding adopt();

  // While workers run: checksums the published snapshots (a worker renamed
  // its .partial) that have no manifest yet, and forgets those that are
  // gone (a worker pruned them); removes nothing. Returns what it holds.
  Holding scan();

  // Removes every sharded snapshot older than `step` (own and fetched):
  // once every rank's shards of `step` are safe (replication_plan.hpp).
  // Returns how many it removed.
  size_t remove_shards_before(int64_t step);
  // Checksums the adopted snapshot `snapshot` again against its manifest;
  // a copy whose bytes changed in memory since is removed, and the error
  // says which file differs.
  util::Status verify(const std::string& snapshot);
  // Whether `snapshot` came from a peer (a replica, a restore's fetch).
  bool fetched(const std::string& snapshot) const;

  // Removes every snapshot newer than `step`, the one the job restores:
  // they belong to a run of steps the job abandons, and a later restore
  // must never take one for the state of a step trained again since.
  size_t remove_newer_than(int64_t step);

  // The manifest of an adopted snapshot, or nullopt (any thread).
  std::optional<Manifest> manifest(const std::string& snapshot) const;
  bool holds(const std::string& snapshot) const { return manifest(snapshot).has_value(); }
  // Where snapshot `snapshot`'s file `file` is (no check that it exists).
  std::filesystem::path file(const std::string& snapshot, const std::string& file) const;

  // A snapshot a peer sends: begin() makes (afresh) the directory its files
  // go to, after checking that `m` fits beside what the tier holds;
  // commit() publishes it once every file arrived with its checksum right;
  // abandon() removes what arrived.
  util::Result<std::filesystem::path> begin(const Manifest& m);
  util::Status commit(const Manifest& m);
  void abandon(const Manifest& m);

 private:
  Tier(std::filesystem::path path, uint64_t limit, ShardPruning pruning)
      : path_(std::move(path)), limit_(limit), pruning_(pruning) {}
  // Under mu_:
  uint64_t held_bytes() const;
  void forget_all_but(const std::set<std::string>& kept);
  // Not under mu_: removes the adopted snapshots `doomed` names.
  size_t remove_if(const std::function<bool(const SnapshotName&)>& doomed);
  Holding holding() const;

  const std::filesystem::path path_;
  const uint64_t limit_;
  const ShardPruning pruning_;
  mutable std::mutex mu_;
  std::map<std::string, Manifest> manifests_;  // adopted snapshots, by name
  std::set<std::string> fetched_;              // those that came from a peer
};

}  // namespace elasticrun::memory
