// Sharded tensor checkpoints that reshard: each rank writes the rows it
// holds, any rank loads any rows, whatever the world size was at the save.
// docs/checkpoint-format.md describes the files.
//
// This layer knows bytes, shapes and dtype names, not libtorch: the tensor
// adapter is elasticrun/checkpoint_torch.hpp. Errors: ConfigError for bad
// arguments, Error for a checkpoint that is missing, corrupt or
// inconsistent (the message names the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace elasticrun::ckpt {

// What a checkpoint records of a tensor, the same in every shard.
struct TensorInfo {
  std::string name;
  std::string dtype;  // e.g. "float32": recorded and compared, never interpreted
  std::size_t element_size = 0;
  std::vector<std::int64_t> shape;  // the global shape; empty for a scalar
  bool replicated = false;          // every rank held all of it; written once, by rank 0

  // Rows along dim 0 (1 for a scalar) and the bytes of one row.
  std::int64_t rows() const;
  std::size_t row_bytes() const;
};

// The part of a tensor one rank saves: rows [row_begin, row_end) along dim 0,
// C-contiguous. A replicated tensor holds all rows on every rank.
struct ShardView {
  TensorInfo info;
  std::int64_t row_begin = 0;
  std::int64_t row_end = 0;
  std::span<const std::byte> bytes;
};

// Rows [begin, end) that rank `rank` of `world_size` holds when `rows` rows
// are split as evenly as possible, the first ranks taking one more.
std::pair<std::int64_t, std::int64_t> even_rows(std::int64_t rows, int rank, int world_size);

// Returns once every rank has called it (the process group's barrier).
using Barrier = std::function<void()>;

// Writes and publishes checkpoints under `root`, a directory every rank sees.
class Checkpointer {
 public:
  // keep >= 1 published checkpoints are retained. `barrier` may be empty
  // only when world_size is 1.
  Checkpointer(std::filesystem::path root, int keep, int rank, int world_size, Barrier barrier);

  // A collective: every rank calls it with its shards of the same tensors.
  // Writes step_<n>.partial/, and once every rank has written, rank 0
  // renames it to step_<n>/, points `latest` at it and drops checkpoints
  // past `keep`. `extra_json` (a JSON value, rank 0's is kept) carries the
  // data position, RNG seeds and the like. Returns the published directory.
  std::filesystem::path save(std::int64_t step, std::span<const ShardView> shards,
                             std::string_view extra_json = "{}");

  const std::filesystem::path& root() const { return root_; }

 private:
  void publish(const std::filesystem::path& partial, const std::filesystem::path& final_dir,
               const std::string& manifest) const;
  void prune() const;

  std::filesystem::path root_;
  int keep_;
  int rank_;
  int world_size_;
  Barrier barrier_;
};

// The directory `latest` under root names, or nullopt when nothing has been
// published yet. Throws Error when `latest` names no checkpoint.
std::optional<std::filesystem::path> latest(const std::filesystem::path& root);

// Published checkpoint directories under root, oldest step first.
std::vector<std::filesystem::path> published(const std::filesystem::path& root);

// One published checkpoint, opened for reading by any number of ranks.
// Opening reads only metadata; data is read, and its checksum verified, per
// shard record that a request overlaps.
class Reader {
 public:
  explicit Reader(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  std::int64_t step() const { return step_; }
  int world_size() const { return world_size_; }
  const std::string& extra_json() const { return extra_json_; }
  std::vector<TensorInfo> tensors() const;
  const TensorInfo& tensor(std::string_view name) const;

  // Copies rows [begin, end) of `name` into `out` (exactly (end - begin) *
  // row_bytes() bytes), from whichever shards hold them.
  void read_rows(std::string_view name, std::int64_t begin, std::int64_t end,
                 std::span<std::byte> out) const;

  // Reads every record and checks its checksum; throws on the first bad one.
  void verify() const;

  struct Record {  // one rank's rows of one tensor in its shard file
    std::string file;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    std::uint32_t crc32c = 0;
    std::int64_t row_begin = 0;
    std::int64_t row_end = 0;
  };
  struct Entry {
    TensorInfo info;
    std::vector<Record> records;  // sorted by row_begin
  };

 private:
  std::vector<std::byte> read_record(const Record& record) const;

  std::filesystem::path dir_;
  std::int64_t step_ = 0;
  int world_size_ = 0;
  std::string extra_json_;
  std::vector<Entry> entries_;  // sorted by name
};

}  // namespace elasticrun::ckpt
