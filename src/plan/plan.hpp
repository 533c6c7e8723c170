// The plan over world sizes: at each size the job may run at, the largest
// micro-batch whose peak fits the GPU, and the micro-batch and gradient
// accumulation that keep the global batch (docs/planner.md, "The plan").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/memory_model.hpp"

namespace elasticrun::plan {

struct PlanRequest {
  TrainingSetup setup;
  std::string model_name;  // the preset's name, for the outputs; empty: a shape given by flags
  double gpu_memory_bytes = 0;
  double margin = 0.1;                  // the fraction of gpu_memory_bytes kept free
  std::optional<int64_t> global_batch;  // sequences per optimizer step, job wide
  std::vector<int64_t> world_sizes;     // in ranks (GPUs)
  // Ranks per node, so each size also has a node count (what the job
  // config's worldSizeOverrides is keyed by); 0: sizes have none.
  int64_t gpus_per_node = 0;
  // The most accumulation steps the SDK's plan_batches admits (its default).
  int64_t max_accum = 64;
  // Evaluate every size at this micro-batch instead of choosing one (what
  // does micro-batch 4 need?); a size where it does not fit is warned about.
  std::optional<int64_t> micro_batch;
};

struct SizePlan {
  int64_t ranks = 0;
  std::optional<int64_t> nodes;
  int64_t shard_degree = 1;
  int64_t largest_fit = 0;  // the largest micro-batch under the budget; 0: none fits
  // What to train with: the largest micro-batch that fits and divides
  // global_batch / ranks, and the accumulation that makes it up; without a
  // global batch, largest_fit and no accumulation. 0 when nothing fits.
  int64_t micro_batch = 0;
  std::optional<int64_t> accumulation;
  bool keeps_global_batch = false;  // ranks * micro_batch * accumulation == global_batch
  Breakdown peak;                   // at micro_batch, or at 1 when nothing fits
  std::vector<std::string> warnings;

  // Whether the SDK can train at this size with micro_batch alone: it fits,
  // keeps the global batch and accumulates at most max_accum times.
  bool usable(int64_t max_accum) const {
    return micro_batch > 0 && micro_batch <= largest_fit && keeps_global_batch && accumulation &&
           *accumulation <= max_accum;
  }
};

struct Plan {
  PlanRequest request;
  double budget_bytes = 0;  // gpu_memory_bytes * (1 - margin)
  double recompute_overhead = 0;
  std::vector<SizePlan> sizes;
  std::vector<std::string> warnings;  // about the whole plan
};

// Throws ConfigError for a bad setup (validate()), no world sizes, a size
// or a memory below 1, a margin outside [0, 1), a global batch below 1, or
// world sizes not whole nodes when gpus_per_node is set.
Plan make_plan(const PlanRequest& request);

// The largest micro-batch whose peak is at most budget_bytes; 0 if not even 1.
int64_t largest_micro_batch(const TrainingSetup& setup, int64_t world_size, double budget_bytes);

}  // namespace elasticrun::plan
