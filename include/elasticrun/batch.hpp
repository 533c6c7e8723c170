// A constant global batch at every world size: how one global batch (samples
// per optimizer step, job wide) is split over the ranks of a world size into
// per-rank micro-batches and a number of gradient-accumulation steps common
// to all ranks, so that accum_steps * sum(micro_batches) == global_batch.
//
// The same plans as the Python SDK's elasticrun.batch (plan_batches,
// admissible_world_sizes, discrete_values_flag; docs/sdk-python.md): a job
// whose ranks mix the two languages, or that moves from one to the other,
// splits alike. load_overrides reads the per-world-size learning rate and
// micro-batch (one size, or a range capped by memory) of the job config file
// (docs/job-config.md). The integration suite compares the two
// (test_sdk_cpp_equivalence.py).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
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

// One entry of the job config's worldSizeOverrides: only the keys the file
// gives are set. The micro-batch is one size (micro_batch_size) or a range
// (max_micro_batch_size: the largest that fits memory at that size, from
// min_micro_batch_size or 1), never both; load_overrides refuses a file
// that says both, or a minimum without a maximum or above it.
struct Override {
  // Each initialised, so that aggregates that name only some (Override{lr,
  // micro}, Override{.max_micro_batch_size = 8}) draw no missing-initializer
  // warning, now or as members are added.
  std::optional<double> learning_rate = std::nullopt;          // learningRate
  std::optional<int64_t> micro_batch_size = std::nullopt;      // microBatchSize
  std::optional<int64_t> min_micro_batch_size = std::nullopt;  // minMicroBatchSize
  std::optional<int64_t> max_micro_batch_size = std::nullopt;  // maxMicroBatchSize

  bool operator==(const Override&) const = default;
};

// World size in nodes -> what the job trains with there.
using Overrides = std::map<int64_t, Override>;

// The variable through which the agent names the job config file (--config,
// made absolute) to its workers.
inline constexpr const char* kConfigFileEnv = "ELASTICRUN_CONFIG_FILE";

// The micro-batch sizes `override` lets plan_batches choose from: its
// micro_batch_size alone; every size from min_micro_batch_size (default 1)
// to max_micro_batch_size; or `fallback` (the job's own sizes) when it gives
// neither. Python's micro_batch_sizes. Throws ConfigError for an entry that
// load_overrides would have refused (both forms, a minimum without a
// maximum or above it, a size below 1, a maximum above 2^20).
std::vector<int64_t> micro_batch_sizes(const Override& override,
                                       const std::vector<int64_t>& fallback);

// "--replica-discrete-values 2,4,8": the node counts among `nodes` at which
// nproc_per_node ranks per node admit the global batch. An entry of
// `overrides` that gives a micro-batch (one size or a range) replaces
// micro_batch_sizes at its node count, as the job will train there
// (micro_batch_sizes above). Throws ConfigError when no node count does, or
// an argument is below 1.
std::string discrete_values_flag(int64_t global_batch,
                                 const std::vector<int64_t>& micro_batch_sizes,
                                 int64_t nproc_per_node, const std::vector<int64_t>& nodes,
                                 int64_t max_accum = 64, const Overrides& overrides = {});

// worldSizeOverrides of the job config file at `path` (docs/job-config.md),
// read with the agent's own parser, so a file the agent started the job with
// is read the same way here, and one it refuses is refused. No such section:
// empty. Throws ConfigError naming the file (and, for a bad section, the
// line) when it cannot be read, is larger than 1 MiB or would be refused by
// elasticrun.
Overrides load_overrides(const std::string& path);

// The same for the file $ELASTICRUN_CONFIG_FILE names; unset or empty (no
// --config, or no agent): empty.
Overrides load_overrides();

}  // namespace elasticrun::sdk
