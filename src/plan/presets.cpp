#include "plan/presets.hpp"

#include "elasticrun/errors.hpp"

namespace elasticrun::plan {
namespace {

ModelShape shape(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t vocab,
                 int64_t ffn_hidden, bool tied) {
  ModelShape m;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.vocab = vocab;
  m.ffn_hidden = ffn_hidden;
  m.tied_embeddings = tied;
  return m;
}

}  // namespace

const std::vector<Preset>& presets() {
  // The config.json of each model on the Hugging Face Hub. Qwen2.5 stands in
  // at 14B and 32B, where Llama 3 has no model; its q, k, v biases (under
  // 0.01% of the parameters) are left out.
  static const std::vector<Preset> table = {
      {"1b", "Llama 3.2 1B", shape(16, 2048, 32, 8, 128256, 8192, true)},
      {"3b", "Llama 3.2 3B", shape(28, 3072, 24, 8, 128256, 8192, true)},
      {"8b", "Llama 3.1 8B", shape(32, 4096, 32, 8, 128256, 14336, false)},
      {"14b", "Qwen2.5 14B", shape(48, 5120, 40, 8, 152064, 13824, false)},
      {"32b", "Qwen2.5 32B", shape(64, 5120, 40, 8, 152064, 27648, false)},
      {"70b", "Llama 3.1 70B", shape(80, 8192, 64, 8, 128256, 28672, false)},
  };
  return table;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const Preset& p : presets()) out.push_back(p.name);
  return out;
}

const Preset& find_preset(const std::string& name) {
  std::string known;
  for (const Preset& p : presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw ConfigError("unknown preset '" + name + "' (known: " + known + ")");
}

}  // namespace elasticrun::plan
