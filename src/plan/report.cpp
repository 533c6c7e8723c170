#include "plan/report.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "plan/names.hpp"

namespace elasticrun::plan {
namespace {

using nlohmann::ordered_json;

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::string printf_string(const char* format, auto... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, format, args...);
  return buffer;
}

std::string model_line(const PlanRequest& r) {
  const ModelShape& m = r.setup.model;
  const double params = parameter_counts(m).total;
  std::string line = r.model_name.empty() ? "model" : r.model_name;
  line += printf_string(
      " (%.2fB parameters; %lld layers, hidden %lld, %lld heads, %lld kv heads, "
      "ffn %lld, vocab %lld%s)",
      params / 1e9, static_cast<long long>(m.layers), static_cast<long long>(m.hidden),
      static_cast<long long>(m.heads),
      static_cast<long long>(m.kv_heads > 0 ? m.kv_heads : m.heads),
      static_cast<long long>(m.ffn_hidden), static_cast<long long>(m.vocab),
      m.tied_embeddings ? ", tied embeddings" : "");
  return line;
}

std::string setup_line(const Plan& p) {
  const TrainingSetup& s = p.request.setup;
  std::string line = "seq " + std::to_string(s.seq_len) + ", " + to_string(s.precision) +
                     (s.quantized_init ? " (quantised init)" : "") + ", " + to_string(s.optimizer) +
                     ", " + to_string(s.sharding);
  if (s.shard_group > 0) line += " (shard group " + std::to_string(s.shard_group) + ")";
  line += ", activation checkpointing " + to_string(s.checkpointing);
  if (s.checkpointing != Checkpointing::none) {
    line += printf_string(" (recompute: +%.0f%% compute)", 100 * p.recompute_overhead);
  }
  return line + ", " + to_string(s.loss) + " loss";
}

ordered_json optional_json(const std::optional<int64_t>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

ordered_json bytes_json(const Breakdown& b) {
  auto whole = [](double x) { return static_cast<int64_t>(std::llround(x)); };
  return ordered_json{{"weights", whole(b.weights)},         {"gradients", whole(b.gradients)},
                      {"optimizer", whole(b.optimizer)},     {"activations", whole(b.activations)},
                      {"temporaries", whole(b.temporaries)}, {"total", whole(b.total())}};
}

}  // namespace

std::string format_table(const Plan& p) {
  const PlanRequest& r = p.request;
  std::string out = model_line(r) + "\n" + setup_line(p) + "\n";
  out += printf_string("budget %.1f GiB per GPU (%.1f GiB less a %.0f%% margin)",
                       p.budget_bytes / kGiB, r.gpu_memory_bytes / kGiB, 100 * r.margin);
  out += r.global_batch ? ", global batch " + std::to_string(*r.global_batch) + "\n" : "\n";
  out += "\n";
  out += printf_string("%6s %5s %6s %6s %5s %8s %8s %8s %8s %8s %8s\n", "ranks", "nodes", "maxfit",
                       "micro", "accum", "weights", "grads", "optim", "activ", "temps", "peak");
  for (const SizePlan& s : p.sizes) {
    const std::string nodes = s.nodes ? std::to_string(*s.nodes) : "-";
    const std::string accum = s.accumulation ? std::to_string(*s.accumulation) : "-";
    const std::string micro = s.micro_batch > 0 ? std::to_string(s.micro_batch) : "-";
    const Breakdown& b = s.peak;
    out += printf_string(
        "%6lld %5s %6lld %6s %5s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f%s\n",
        static_cast<long long>(s.ranks), nodes.c_str(), static_cast<long long>(s.largest_fit),
        micro.c_str(), accum.c_str(), b.weights / kGiB, b.gradients / kGiB, b.optimizer / kGiB,
        b.activations / kGiB, b.temporaries / kGiB, b.total() / kGiB,
        s.micro_batch > s.largest_fit || s.largest_fit == 0 ? "  does not fit" : "");
  }
  out += "(GiB per rank at the micro-batch shown; maxfit: the largest micro-batch that fits)\n";
  bool heading = false;
  auto warn = [&](const std::string& w) {
    if (!heading) out += "\nwarnings:\n";
    heading = true;
    out += "  " + w + "\n";
  };
  for (const SizePlan& s : p.sizes) {
    for (const std::string& w : s.warnings) warn(w);
  }
  for (const std::string& w : p.warnings) warn(w);
  return out;
}

std::string format_json(const Plan& p) {
  const PlanRequest& r = p.request;
  const ModelShape& m = r.setup.model;
  const TrainingSetup& s = r.setup;
  ordered_json j;
  j["model"] = {
      {"preset", r.model_name.empty() ? ordered_json(nullptr) : ordered_json(r.model_name)},
      {"parameters", static_cast<int64_t>(std::llround(parameter_counts(m).total))},
      {"layers", m.layers},
      {"hidden", m.hidden},
      {"heads", m.heads},
      {"kv_heads", m.kv_heads > 0 ? m.kv_heads : m.heads},
      {"ffn_hidden", m.ffn_hidden},
      {"vocab", m.vocab},
      {"tied_embeddings", m.tied_embeddings}};
  j["setup"] = {
      {"seq_len", s.seq_len},
      {"precision", to_string(s.precision)},
      {"quantized_init", s.quantized_init},
      {"optimizer", to_string(s.optimizer)},
      {"sharding", to_string(s.sharding)},
      {"shard_group", s.shard_group > 0 ? ordered_json(s.shard_group) : ordered_json(nullptr)},
      {"activation_checkpointing", to_string(s.checkpointing)},
      {"loss", to_string(s.loss)}};
  j["gpu_memory_bytes"] = static_cast<int64_t>(std::llround(r.gpu_memory_bytes));
  j["margin"] = r.margin;
  j["budget_bytes"] = static_cast<int64_t>(std::llround(p.budget_bytes));
  j["global_batch"] = optional_json(r.global_batch);
  j["gpus_per_node"] = r.gpus_per_node > 0 ? ordered_json(r.gpus_per_node) : ordered_json(nullptr);
  j["max_accum"] = r.max_accum;
  j["recompute_overhead"] = p.recompute_overhead;
  ordered_json sizes = ordered_json::array();
  for (const SizePlan& size : p.sizes) {
    sizes.push_back({{"ranks", size.ranks},
                     {"nodes", optional_json(size.nodes)},
                     {"shard_degree", size.shard_degree},
                     {"largest_micro_batch", size.largest_fit},
                     {"micro_batch", size.micro_batch},
                     {"accumulation", optional_json(size.accumulation)},
                     {"keeps_global_batch", size.keeps_global_batch},
                     {"usable", size.usable(r.max_accum)},
                     {"peak_bytes", bytes_json(size.peak)},
                     {"warnings", size.warnings}});
  }
  j["sizes"] = std::move(sizes);
  j["warnings"] = p.warnings;
  return j.dump(2) + "\n";
}

}  // namespace elasticrun::plan
