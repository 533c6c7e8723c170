// What one attempt starts on this node: each local rank's command line
// (torchrun's ${local_rank} substituted), environment, CPU set, and where
// its logs, error file and stacks file go, under <run_dir>/attempt_<n>/
// (made afresh, as torchrun does).
#pragma once

#include <filesystem>
#include <vector>

#include "agent/attempt.hpp"
#include "agent/rank_logs.hpp"
#include "control/assignment.hpp"
#include "supervisor/spawn.hpp"

namespace elasticrun::agent {

struct AttemptPlan {
  std::filesystem::path dir;                 // <run_dir>/attempt_<n>
  std::vector<supervisor::SpawnSpec> specs;  // local rank i's, without its streams
  std::vector<RankPlan> logs;                // local rank i's streams
  std::vector<control::RankEnv> env;         // local rank i's environment
  std::vector<std::string> error_files;      // TORCHELASTIC_ERROR_FILE of each
  std::vector<std::string> stack_files;      // ELASTICRUN_STACK_FILE of each
};

// Makes the attempt directory (removing a leftover first) and a directory
// per local rank in it; throws std::filesystem::filesystem_error when it cannot.
AttemptPlan plan_attempt(const AgentConfig& config, const NodeContext& node, const Assignment& a,
                         int attempt_index);

}  // namespace elasticrun::agent
