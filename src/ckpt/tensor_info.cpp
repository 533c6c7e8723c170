#include "elasticrun/checkpoint.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::ckpt {

std::int64_t TensorInfo::rows() const {
  return shape.empty() ? 1 : shape.front();
}

std::size_t TensorInfo::row_bytes() const {
  std::size_t n = element_size;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= static_cast<std::size_t>(shape[d]);
  return n;
}

std::pair<std::int64_t, std::int64_t> even_rows(std::int64_t rows, int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size || rows < 0) {
    throw ConfigError("even_rows: rank " + std::to_string(rank) + " of world size " +
                      std::to_string(world_size) + " over " + std::to_string(rows) + " rows");
  }
  const std::int64_t base = rows / world_size;
  const std::int64_t extra = rows % world_size;
  const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace elasticrun::ckpt
