// libtorch tensors through the sharded checkpoint format
// (elasticrun/checkpoint.hpp, docs/checkpoint-format.md). Built only with
// ELASTICRUN_WITH_TORCH; the library is elasticrun_ckpt_torch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "elasticrun/checkpoint.hpp"

namespace elasticrun::ckpt {

// What one rank saves of one tensor: `local` holds rows [row_begin,
// row_begin + local.size(0)) along dim 0 of a tensor of `global_rows` rows,
// or, replicated, the whole tensor (every rank has it; rank 0's is written).
struct TensorShard {
  std::string name;
  at::Tensor local;
  std::int64_t global_rows = 0;
  std::int64_t row_begin = 0;
  bool replicated = false;
};

TensorShard sharded(std::string name, at::Tensor local, std::int64_t global_rows,
                    std::int64_t row_begin);
TensorShard replicated(std::string name, at::Tensor full);

// Checkpointer::save for tensors (any device, any layout: they are copied
// to contiguous CPU memory first). A collective, like Checkpointer::save.
std::filesystem::path save(Checkpointer& checkpointer, std::int64_t step,
                           const std::vector<TensorShard>& shards,
                           std::string_view extra_json = "{}");

// Rows [begin, end) of `name` as a new CPU tensor of its saved dtype, read
// from whichever shards hold them, checksums verified.
at::Tensor load_rows(const Reader& reader, std::string_view name, std::int64_t begin,
                     std::int64_t end);
// The whole tensor (a scalar comes back 0-dimensional).
at::Tensor load(const Reader& reader, std::string_view name);

}  // namespace elasticrun::ckpt
