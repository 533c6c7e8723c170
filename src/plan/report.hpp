// The plan's outputs: a table for people and JSON for scripts (the schema is
// in docs/planner.md, "JSON"). Both are made here only; neither holds a time
// or anything else that differs between two runs of the same request.
#pragma once

#include <string>

#include "plan/plan.hpp"

namespace elasticrun::plan {

// A heading (model, setup, budget, recompute overhead), one row per world
// size (micro-batch, accumulation, the peak's five terms and total in GiB),
// then the warnings.
std::string format_table(const Plan& plan);

// {"model": {...}, "setup": {...}, "gpu_memory_bytes", "margin",
//  "budget_bytes", "global_batch", "gpus_per_node", "max_accum",
//  "recompute_overhead", "sizes": [{"ranks", "nodes", "shard_degree",
//  "largest_micro_batch", "micro_batch", "accumulation",
//  "keeps_global_batch", "usable", "peak_bytes": {"weights", "gradients",
//  "optimizer", "activations", "temporaries", "total"}, "warnings"}],
//  "warnings"}, indented; bytes are whole numbers, absent values null.
std::string format_json(const Plan& plan);

}  // namespace elasticrun::plan
