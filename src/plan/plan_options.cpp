#include "plan/plan_options.hpp"

#include "elasticrun/errors.hpp"
#include "plan/emit_config.hpp"
#include "plan/names.hpp"
#include "plan/presets.hpp"
#include "plan/report.hpp"
#include "plan/world_sizes.hpp"

namespace elasticrun::plan {
namespace {

int64_t shape_field(const std::optional<int64_t>& flag, int64_t preset_value, bool have_preset,
                    const char* name) {
  if (flag) return *flag;
  if (have_preset) return preset_value;
  throw ConfigError(std::string("the model needs ") + name + " (or --preset)");
}

ModelShape model_of(const PlanOptions& o) {
  const bool have_preset = !o.preset.empty();
  const ModelShape base = have_preset ? find_preset(o.preset).shape : ModelShape{};
  ModelShape m;
  m.layers = shape_field(o.layers, base.layers, have_preset, "--layers");
  m.hidden = shape_field(o.hidden, base.hidden, have_preset, "--hidden");
  m.heads = shape_field(o.heads, base.heads, have_preset, "--heads");
  m.kv_heads = o.kv_heads.value_or(have_preset ? base.kv_heads : 0);
  m.vocab = shape_field(o.vocab, base.vocab, have_preset, "--vocab");
  m.ffn_hidden = shape_field(o.ffn_hidden, base.ffn_hidden, have_preset, "--ffn-hidden");
  m.tied_embeddings = o.tied_embeddings || base.tied_embeddings;
  m.parameters = o.params;
  return m;
}

}  // namespace

PlanRequest make_request(const PlanOptions& o) {
  PlanRequest r;
  r.model_name = o.preset;
  r.setup.model = model_of(o);
  r.setup.seq_len = o.seq_len;
  r.setup.precision = parse_precision(o.precision);
  r.setup.quantized_init = o.quantized_init;
  r.setup.optimizer = parse_optimizer(o.optimizer);
  r.setup.sharding = parse_sharding(o.sharding);
  r.setup.shard_group = o.shard_group;
  r.setup.checkpointing = parse_checkpointing(o.checkpointing);
  r.setup.loss = parse_loss(o.loss);
  if (!(o.gpu_memory_gib > 0)) throw ConfigError("--gpu-memory must be above 0 GiB");
  r.gpu_memory_bytes = o.gpu_memory_gib * 1024.0 * 1024 * 1024;
  r.margin = o.margin;
  r.global_batch = o.global_batch;
  if (o.gpus_per_node < 0) throw ConfigError("--gpus-per-node must be at least 1");
  r.gpus_per_node = o.gpus_per_node;
  r.max_accum = o.max_accum;
  r.micro_batch = o.micro_batch;
  if (o.world_sizes.empty()) throw ConfigError("--world-sizes is required");
  for (const int64_t n : parse_world_sizes(o.world_sizes)) {
    r.world_sizes.push_back(o.gpus_per_node > 0 ? n * o.gpus_per_node : n);
  }
  return r;
}

PlanOutput run_plan(const PlanOptions& o) {
  const Plan plan = make_plan(make_request(o));
  PlanOutput out;
  out.report = o.json ? format_json(plan) : format_table(plan);
  if (!o.emit_config.empty()) {
    EmittedConfig config = format_overrides(plan);
    out.config = std::move(config.text);
    out.notes = std::move(config.warnings);
  }
  return out;
}

}  // namespace elasticrun::plan
