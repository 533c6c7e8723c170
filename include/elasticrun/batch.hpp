// A constant global batch at every world size: how one global batch (samples
// per optimizer step, job wide) is split over the ranks of a world size into
// per-rank micro-batches and a number of gradient-accumulation steps common
// to all ranks, so that accum_steps * sum(micro_batches) == global_batch.
//
// The same plans as the Python SDK's elasticrun.batch (plan_batches,
// admissible_world_sizes; docs/sdk-python.md): a job whose ranks mix the
// two languages, or that moves from one to the other, splits alike. The
// integration suite compares the two (test_sdk_cpp_equivalence.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"

namespace elasticrun::sdk {

// How one global batch is split over the ranks of one world size.
// micro_batches[r] is rank r's micro-batch; larger ones go to lower ranks.
struct BatchPlan {
  int64_t global_batch = 0;
  std::vector<int64_t> micro_batches;
  int64_t accum_steps = 0;

  int world_size() const { return static_cast<int>(micro_batches.size()); }
  // Each rank's samples per optimizer step (micro-batch x accumulation
  // steps): what ElasticSampler::set_world takes.
  std::vector<int64_t> local_batches() const;
  // ConfigError for a rank outside the world.
  int64_t micro_batch(int rank) const;
  int64_t local_batch(int rank) const;
  // One line, e.g. "global batch 128 on 24 ranks = 8 ranks x 6 + 16 ranks x
  // 5, 1 accumulation step".
  std::string describe() const;

  bool operator==(const BatchPlan&) const = default;
};

// The split of global_batch over world_size ranks, each rank's micro-batch
// taken from micro_batch_sizes (any order, repeats ignored). Preferred, in
// order: the fewest accumulation steps (at most max_accum); the most even
// split (smallest largest-minus-smallest micro-batch); the larger
// micro-batches. Throws ConfigError, saying why, when no plan exists or an
// argument is below 1.
BatchPlan plan_batches(int64_t global_batch, int64_t world_size,
                       const std::vector<int64_t>& micro_batch_sizes, int64_t max_accum = 64);

// The world sizes (in ranks) among candidates that have a plan; sorted,
// without repeats.
std::vector<int64_t> admissible_world_sizes(int64_t global_batch,
                                            const std::vector<int64_t>& micro_batch_sizes,
                                            const std::vector<int64_t>& candidates,
                                            int64_t max_accum = 64);

}  // namespace elasticrun::sdk
