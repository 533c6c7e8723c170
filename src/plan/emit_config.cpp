#include "plan/emit_config.hpp"

#include <algorithm>
#include <cstdio>

#include "elasticrun/errors.hpp"
#include "plan/names.hpp"

namespace elasticrun::plan {
namespace {

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n != 1 ? "s" : "");
}

// "16 ranks x 3 + 8 ranks x 2, 4 accumulation steps", as the SDKs'
// BatchPlan::describe words the split.
std::string describe(const RangeSplit& s, int64_t ranks) {
  std::string split;
  if (s.ranks_at_larger > 0) {
    split = plural(s.ranks_at_larger, "rank") + " x " + std::to_string(s.larger) + " + ";
  }
  split += plural(ranks - s.ranks_at_larger, "rank") + " x " + std::to_string(s.smaller);
  return split + ", " + plural(s.accumulation, "accumulation step");
}

}  // namespace

std::optional<RangeSplit> range_split(int64_t global_batch, int64_t ranks, int64_t largest,
                                      int64_t max_accum) {
  for (int64_t k = 1; k <= max_accum && k * ranks <= global_batch; ++k) {
    if (global_batch % k != 0) continue;
    const int64_t per_step = global_batch / k;
    if (per_step > ranks * largest) continue;
    const int64_t smaller = per_step / ranks;
    const int64_t extra = per_step % ranks;
    return RangeSplit{k, extra > 0 ? smaller + 1 : smaller, smaller, extra};
  }
  return std::nullopt;
}

EmittedConfig format_overrides(const Plan& plan) {
  const PlanRequest& r = plan.request;
  if (r.gpus_per_node <= 0) {
    throw ConfigError("--emit-config needs --gpus-per-node: worldSizeOverrides is keyed by nodes");
  }
  if (!r.global_batch) {
    throw ConfigError(
        "--emit-config needs --global-batch: each size's micro-batch must make it up");
  }
  const int64_t g = *r.global_batch;
  EmittedConfig out;
  const TrainingSetup& s = r.setup;
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.4g", plan.budget_bytes / (1024.0 * 1024 * 1024));
  out.text =
      "# Written by elasticctl plan (docs/planner.md): " +
      (r.model_name.empty() ? std::string("a model") : r.model_name) + ", seq " +
      std::to_string(s.seq_len) + ", " + to_string(s.precision) + ", " + to_string(s.sharding) +
      ", checkpointing " + to_string(s.checkpointing) + ",\n# " + plural(r.gpus_per_node, "GPU") +
      " per node. " +
      (r.micro_batch ? "Micro-batch " + std::to_string(*r.micro_batch) +
                           " at each node count where it fits " + std::string(gib) +
                           " GiB per GPU\n# and keeps the global batch " + std::to_string(g)
                     : "At each node count the largest micro-batch that fits " + std::string(gib) +
                           " GiB per GPU;\n# the SDKs split the global batch " + std::to_string(g) +
                           " within it") +
      " (after each entry: the split).\n";
  std::string entries;
  for (const SizePlan& size : plan.sizes) {
    const std::string nodes = std::to_string(*size.nodes);
    const auto leave_out = [&](const std::string& why) {
      out.warnings.push_back("--emit-config leaves out " + nodes + " nodes: " + why);
    };
    if (r.micro_batch) {
      // The user asked for this micro-batch: an entry of exactly it.
      if (!size.usable(r.max_accum)) {
        leave_out(size.warnings.empty() ? "no usable micro-batch" : size.warnings[0]);
        continue;
      }
      const RangeSplit even{*size.accumulation, size.micro_batch, size.micro_batch, 0};
      entries += "  " + nodes + ": {microBatchSize: " + std::to_string(size.micro_batch) + "}  # " +
                 describe(even, size.ranks) + "\n";
      continue;
    }
    if (size.largest_fit == 0) {
      leave_out(size.warnings.empty() ? "nothing fits" : size.warnings[0]);
      continue;
    }
    const int64_t largest = std::min(size.largest_fit, (g + size.ranks - 1) / size.ranks);
    const auto split = range_split(g, size.ranks, largest, r.max_accum);
    if (!split) {
      leave_out("no split of the global batch " + std::to_string(g) + " over " +
                std::to_string(size.ranks) + " ranks at micro-batches up to " +
                std::to_string(largest) + " in at most " + std::to_string(r.max_accum) +
                " accumulation steps");
      continue;
    }
    entries += "  " + nodes + ": {maxMicroBatchSize: " + std::to_string(largest) + "}  # " +
               describe(*split, size.ranks) + "\n";
  }
  if (entries.empty()) {
    throw ConfigError(
        "--emit-config: no node count has a micro-batch that fits and keeps the "
        "global batch");
  }
  out.text += "worldSizeOverrides:\n" + entries;
  return out;
}

}  // namespace elasticrun::plan
