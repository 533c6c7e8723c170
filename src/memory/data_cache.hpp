// The node's dataset cache (docs/memory-tier.md, "Dataset cache"): a
// directory in shared memory (tmpfs) that the agent makes, names to its
// workers (ELASTICRUN_DATA_CACHE_DIR, and the most it may hold as
// ELASTICRUN_DATA_CACHE_LIMIT) and removes when it ends (its death watch
// when it is killed). What a worker read and decoded once (a dataset
// shard, as arrays) is put there by the SDK (python/elasticrun/data.py), and
// a worker that restarts or re-forms on this node maps it again instead of
// reading and decoding it again. The agent only makes and removes it: the
// SDK owns what is in it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

namespace elasticrun::memory {

class DataCache {
 public:
  // A fresh directory under `base` (Tier::default_base). `limit`: the most
  // bytes it may hold; what the file system has free now bounds it too.
  // Throws elasticrun::Error when it cannot.
  static std::unique_ptr<DataCache> create(const std::filesystem::path& base,
                                           std::optional<uint64_t> limit);
  ~DataCache();  // removes the directory and everything in it
  DataCache(const DataCache&) = delete;
  DataCache& operator=(const DataCache&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint64_t limit() const { return limit_; }

 private:
  DataCache(std::filesystem::path path, uint64_t limit) : path_(std::move(path)), limit_(limit) {}

  const std::filesystem::path path_;
  const uint64_t limit_;
};

}  // namespace elasticrun::memory
