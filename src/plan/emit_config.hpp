// `elasticctl plan --emit-config`: the worldSizeOverrides section of a job
// config file (docs/job-config.md), one entry per node count the plan found
// usable, so the SDK's batch plan at every size stays within memory. The
// agent's parser (src/cli/job_config) reads what this writes; the unit
// tests parse it back through sdk::load_overrides.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace elasticrun::plan {

struct EmittedConfig {
  std::string text;                   // YAML, a comment heading the section
  std::vector<std::string> warnings;  // the sizes left out, and why
};

// Throws ConfigError when the plan has no node counts (gpus_per_node unset)
// or no global batch, or when no size is usable.
EmittedConfig format_overrides(const Plan& plan);

}  // namespace elasticrun::plan
