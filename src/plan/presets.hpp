// Named model shapes for `elasticctl plan --preset`: Llama-like decoders
// (GQA, SwiGLU, RMSNorm) from 1B to 70B, each the published configuration of
// an open model of that size (docs/planner.md, "Presets", names the source).
#pragma once

#include <string>
#include <vector>

#include "plan/memory_model.hpp"

namespace elasticrun::plan {

struct Preset {
  std::string name;    // "1b", "3b", "8b", "14b", "32b", "70b"
  std::string source;  // whose configuration the shape is
  ModelShape shape;
};

const std::vector<Preset>& presets();
std::vector<std::string> preset_names();
// ConfigError for an unknown name, listing the known ones.
const Preset& find_preset(const std::string& name);

}  // namespace elasticrun::plan
