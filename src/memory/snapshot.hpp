// What the memory tier holds (docs/memory-tier.md): snapshots, each one
// rank's whole state at one step as the Python SDK writes it (a DCP
// checkpoint directory of flat files, python/elasticrun/memory.py), and the
// manifest the agent makes of each: every file's size and CRC32C. Names
// and manifests are made and parsed here and nowhere else.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::memory {

// "step_<step, 9 digits>.r<rank>": rank `rank`'s snapshot of step `step`,
// of a state that is not sharded (it is every rank's: any rank's snapshot
// of a step restores it); "step_<step>.r<rank>of<world>": rank `rank`'s
// shards of a state saved by `world` ranks (a step restores only from all
// of them).
struct SnapshotName {
  int64_t step = 0;
  int rank = 0;
  std::optional<int> world;  // sharded: the ranks that saved it

  std::string str() const;
  // nullopt for anything else (a ".partial" being written, a stray file).
  static std::optional<SnapshotName> parse(const std::string& name);
};

// A snapshot being written or fetched: "<name>.partial", never loaded.
inline constexpr const char* kPartialSuffix = ".partial";

struct ManifestFile {
  std::string name;  // flat: no '/', never "." or ".."
  uint64_t size = 0;
  uint32_t crc32c = 0;
};

// Text, one line each: "elasticrun-manifest 1 <snapshot name>", then
// "<size> <crc32c, 8 hex digits> <file name>" per file, sorted by name.
struct Manifest {
  std::string snapshot;
  std::vector<ManifestFile> files;

  uint64_t bytes() const;
  std::string serialize() const;
  // Refuses anything a peer could use to reach outside the snapshot's
  // directory (a file name with '/', "..") or that is not a manifest.
  static util::Result<Manifest> parse(const std::string& text);
  // Reads every file of `dir` (regular files, no subdirectories) and
  // checksums it.
  static util::Result<Manifest> of_directory(const std::filesystem::path& dir);
};

// Whether `name` may be a file of a snapshot (see ManifestFile::name).
bool valid_file_name(const std::string& name);

}  // namespace elasticrun::memory
