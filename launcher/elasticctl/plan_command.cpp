#include <cstdio>
#include <fstream>
#include <memory>

#include "commands.hpp"
#include "elasticrun/errors.hpp"
#include "plan/names.hpp"
#include "plan/plan_options.hpp"
#include "plan/presets.hpp"

namespace elasticrun::ctlcmd {
namespace {

int run_plan_command(const plan::PlanOptions& o) {
  const plan::PlanOutput out = plan::run_plan(o);
  std::fwrite(out.report.data(), 1, out.report.size(), stdout);
  for (const std::string& note : out.notes)
    std::fprintf(stderr, "elasticctl plan: %s\n", note.c_str());
  if (!o.emit_config.empty()) {
    std::ofstream file(o.emit_config, std::ios::binary | std::ios::trunc);
    file << out.config;
    file.flush();
    if (!file) throw Error("cannot write " + o.emit_config);
  }
  return kExitOk;
}

}  // namespace

Command add_plan(CLI::App& app) {
  auto o = std::make_shared<plan::PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan",
      "Per-GPU peak memory at each world size, the largest micro-batch that fits and the "
      "accumulation that keeps the global batch (docs/planner.md)");
  cmd->add_option("--preset", o->preset, "A Llama-like model shape")
      ->check(CLI::IsMember(plan::preset_names()));
  cmd->add_option("--params", o->params, "Parameter count, if not the shape's");
  cmd->add_option("--layers", o->layers, "Decoder layers");
  cmd->add_option("--hidden", o->hidden, "Hidden size");
  cmd->add_option("--heads", o->heads, "Attention heads");
  cmd->add_option("--kv-heads", o->kv_heads, "Key/value heads (default: --heads)");
  cmd->add_option("--vocab", o->vocab, "Vocabulary size");
  cmd->add_option("--ffn-hidden", o->ffn_hidden, "The SwiGLU MLP's intermediate size");
  cmd->add_flag("--tied-embeddings", o->tied_embeddings, "The output head is the embedding");
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence")->required();
  cmd->add_option("--precision", o->precision, "The precision recipe")
      ->check(CLI::IsMember(plan::precision_names()))
      ->capture_default_str();
  cmd->add_flag("--quantized-init", o->quantized_init,
                "fp8 recipes: primary weights kept quantised only (TE's quantised init)");
  cmd->add_option("--optimizer", o->optimizer)
      ->check(CLI::IsMember(plan::optimizer_names()))
      ->capture_default_str();
  cmd->add_option("--sharding", o->sharding)
      ->check(CLI::IsMember(plan::sharding_names()))
      ->capture_default_str();
  cmd->add_option("--shard-group", o->shard_group, "Ranks a shard spreads over (default: all)");
  cmd->add_option("--activation-checkpointing", o->checkpointing)
      ->check(CLI::IsMember(plan::checkpointing_names()))
      ->capture_default_str();
  cmd->add_option("--loss", o->loss, "Cross-entropy: eager (fp32 logits), fused or chunked")
      ->check(CLI::IsMember(plan::loss_names()))
      ->capture_default_str();
  cmd->add_option("--gpu-memory", o->gpu_memory_gib, "Memory per GPU, GiB")->required();
  cmd->add_option("--margin", o->margin, "Fraction of the GPU memory kept free")
      ->capture_default_str();
  cmd->add_option("--global-batch", o->global_batch, "Sequences per optimizer step, job wide");
  cmd->add_option("--world-sizes", o->world_sizes,
                  "Sizes to plan for: 2:8, 2:8:2 or 2,4,8 (GPUs, or nodes with --gpus-per-node)")
      ->required();
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "Count world sizes in nodes of N GPUs");
  cmd->add_option("--max-accum", o->max_accum, "The most accumulation steps the SDK plans")
      ->capture_default_str();
  cmd->add_option("--micro-batch", o->micro_batch,
                  "Evaluate at this micro-batch instead of the largest that fits");
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  cmd->add_option("--emit-config", o->emit_config,
                  "Write a job config's worldSizeOverrides to this file (needs --gpus-per-node "
                  "and --global-batch)");
  return {cmd, [o] { return run_plan_command(*o); }};
}

}  // namespace elasticrun::ctlcmd
