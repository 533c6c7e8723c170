// File names and metadata encoding of a checkpoint directory
// (docs/checkpoint-format.md is the description of record).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elasticrun/checkpoint.hpp"

namespace elasticrun::ckpt::layout {

inline constexpr std::string_view kFormat = "elasticrun-tensor-checkpoint";
inline constexpr int kVersion = 1;
inline constexpr std::string_view kLatest = "latest";
inline constexpr std::string_view kManifest = "checkpoint.json";
inline constexpr std::string_view kPartialSuffix = ".partial";

std::string step_dir(std::int64_t step);                            // step_000000042
std::optional<std::int64_t> parse_step_dir(std::string_view name);  // only published names
std::string shard_data(int rank);                                   // shard_00003.bin
std::string shard_meta(int rank);                                   // shard_00003.json

// One tensor's rows in a shard file, with what the file says about the tensor.
struct ShardRecord {
  TensorInfo info;
  Reader::Record where;
};

std::string encode_shard_meta(int rank, int world_size, const std::vector<ShardRecord>& records);
// Throws Error naming `file` when the text is not a shard metadata file of
// this version written by `rank` of `world_size`, or a record in it does not
// add up (sizes against shapes, rows against the global shape).
std::vector<ShardRecord> decode_shard_meta(std::string_view text, int rank, int world_size,
                                           const std::string& file);

std::string encode_manifest(std::int64_t step, int world_size, std::string_view extra_json);
struct Manifest {
  std::int64_t step = 0;
  int world_size = 0;
  std::string extra_json;
};
Manifest decode_manifest(std::string_view text, const std::string& file);

}  // namespace elasticrun::ckpt::layout
