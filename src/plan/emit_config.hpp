// `elasticctl plan --emit-config`: the worldSizeOverrides section of a job
// config file (docs/job-config.md), one entry per node count at which the
// SDKs can train within memory, so the batch plan at every size stays within
// it. The agent's parser (src/cli/job_config) reads what this writes; the
// unit tests parse it back through sdk::load_overrides and plan each size
// with sdk::plan_batches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace elasticrun::plan {

struct EmittedConfig {
  std::string text;                   // YAML, a comment heading the section
  std::vector<std::string> warnings;  // the sizes left out, and why
};

// Without --micro-batch each entry is a range, `maxMicroBatchSize`: the
// largest micro-batch that fits (or the ranks' share of the global batch,
// ceil(G / ranks), when that is smaller: no rank can use more), at every
// node count where the SDKs' plan_batches splits the global batch within it
// in at most max_accum steps, uneven splits included (range_split). With
// --micro-batch M, `microBatchSize: M` where M fits and keeps the global
// batch. Each entry's comment is the split the SDKs will make. Throws
// ConfigError when the plan has no node counts (gpus_per_node unset) or no
// global batch, or when no size is usable.
EmittedConfig format_overrides(const Plan& plan);

// How the SDKs' plan_batches splits `global_batch` over `ranks` when every
// micro-batch from 1 to `largest` is allowed: the fewest accumulation steps
// k <= max_accum that divide the global batch with ranks <= G / k <=
// ranks x largest, then the most even split of G / k, `ranks_at_larger`
// ranks (the lowest) at `larger` and the rest at `smaller` (larger ==
// smaller + 1, or equal with ranks_at_larger 0). The closed form of
// plan_batches for consecutive sizes; the unit tests hold it to the SDK.
// nullopt when no such k exists.
struct RangeSplit {
  int64_t accumulation = 0;
  int64_t larger = 0;
  int64_t smaller = 0;
  int64_t ranks_at_larger = 0;
};
std::optional<RangeSplit> range_split(int64_t global_batch, int64_t ranks, int64_t largest,
                                      int64_t max_accum);

}  // namespace elasticrun::plan
