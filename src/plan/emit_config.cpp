#include "plan/emit_config.hpp"

#include "elasticrun/errors.hpp"
#include "plan/names.hpp"

namespace elasticrun::plan {

EmittedConfig format_overrides(const Plan& plan) {
  const PlanRequest& r = plan.request;
  if (r.gpus_per_node <= 0) {
    throw ConfigError("--emit-config needs --gpus-per-node: worldSizeOverrides is keyed by nodes");
  }
  if (!r.global_batch) {
    throw ConfigError(
        "--emit-config needs --global-batch: each size's micro-batch must make it up");
  }
  EmittedConfig out;
  const TrainingSetup& s = r.setup;
  out.text = "# Written by elasticctl plan (docs/planner.md): the largest micro-batch that fits " +
             std::to_string(static_cast<long long>(plan.budget_bytes / (1024.0 * 1024 * 1024))) +
             " GiB per GPU\n# and keeps the global batch " + std::to_string(*r.global_batch) +
             " at each node count (" + std::to_string(r.gpus_per_node) + " GPUs per node; " +
             (r.model_name.empty() ? std::string("model") : r.model_name) + ", seq " +
             std::to_string(s.seq_len) + ", " + to_string(s.precision) + ", " +
             to_string(s.sharding) + ", checkpointing " + to_string(s.checkpointing) + ").\n";
  std::string entries;
  for (const SizePlan& size : plan.sizes) {
    if (!size.usable(r.max_accum)) {
      out.warnings.push_back(
          "--emit-config leaves out " + std::to_string(*size.nodes) +
          " nodes: " + (size.warnings.empty() ? "no usable micro-batch" : size.warnings[0]));
      continue;
    }
    entries += "  " + std::to_string(*size.nodes) +
               ": {microBatchSize: " + std::to_string(size.micro_batch) + "}\n";
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
