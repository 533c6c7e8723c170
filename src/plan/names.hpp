// The planner's choices as the command line and the JSON spell them, made
// and parsed here only.
#pragma once

#include <string>
#include <vector>

#include "plan/memory_model.hpp"

namespace elasticrun::plan {

std::string to_string(Precision p);
std::string to_string(Optimizer o);
std::string to_string(Sharding s);
std::string to_string(Checkpointing c);
std::string to_string(Loss l);

// ConfigError for an unknown name, listing the known ones.
Precision parse_precision(const std::string& name);
Optimizer parse_optimizer(const std::string& name);
Sharding parse_sharding(const std::string& name);
Checkpointing parse_checkpointing(const std::string& name);
Loss parse_loss(const std::string& name);

// Every spelling, in order, for --help and CLI11's checks.
std::vector<std::string> precision_names();
std::vector<std::string> optimizer_names();
std::vector<std::string> sharding_names();
std::vector<std::string> checkpointing_names();
std::vector<std::string> loss_names();

}  // namespace elasticrun::plan
