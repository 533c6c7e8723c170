// `elasticctl plan`'s flags as plain values, and the command itself short
// of printing: launcher/elasticctl/plan_command.cpp binds the flags to a
// PlanOptions, calls run_plan and writes what it returns; the unit tests
// call run_plan the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace elasticrun::plan {

struct PlanOptions {
  // The model: a preset, the shape's flags (which override the preset's), or both.
  std::string preset;
  std::optional<int64_t> params, layers, hidden, heads, kv_heads, vocab, ffn_hidden;
  bool tied_embeddings = false;
  int64_t seq_len = 0;
  std::string precision = "bf16";
  bool quantized_init = false;
  std::string optimizer = "adam";
  std::string sharding = "ddp";
  int64_t shard_group = 0;
  std::string checkpointing = "none";
  std::string loss = "eager";
  double gpu_memory_gib = 0;
  double margin = 0.1;
  std::optional<int64_t> global_batch;
  std::string world_sizes;    // parse_world_sizes' syntax; in nodes when gpus_per_node is set
  int64_t gpus_per_node = 0;  // 0: world sizes are in GPUs
  int64_t max_accum = 64;
  std::optional<int64_t> micro_batch;  // evaluate at this micro-batch
  bool json = false;
  std::string emit_config;  // a path; empty: none
};

// The request the options describe. ConfigError, naming the flag, for a
// missing shape field, a bad name or number, or anything make_plan refuses.
PlanRequest make_request(const PlanOptions& options);

struct PlanOutput {
  std::string report;              // the table, or JSON with options.json
  std::string config;              // the --emit-config file's text; empty without it
  std::vector<std::string> notes;  // for stderr: sizes --emit-config left out
};

// make_request, make_plan and the outputs. Throws ConfigError.
PlanOutput run_plan(const PlanOptions& options);

}  // namespace elasticrun::plan
