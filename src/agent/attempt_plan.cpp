#include "agent/attempt_plan.hpp"

#include "agent/stacks.hpp"
#include "agent/worker_env.hpp"

namespace elasticrun::agent {

namespace fs = std::filesystem;

AttemptPlan plan_attempt(const AgentConfig& config, const NodeContext& node, const Assignment& a,
                         int attempt_index) {
  WorkerEnvOptions eo;
  eo.role = config.role;
  eo.run_id = config.run_id;
  eo.max_restarts = config.max_restarts;
  eo.virtual_local_rank = config.virtual_local_rank;
  eo.stack_signal = stack_signal();
  if (config.progress.hang.mode == health::HangLimit::Mode::kFixed) {
    eo.hang_seconds = static_cast<double>(config.progress.hang.fixed.count()) / 1000.0;
  }
  AttemptPlan plan;
  plan.dir = node.run_dir / ("attempt_" + std::to_string(attempt_index));
  // torchrun recreates the attempt directory; a leftover of a crashed run must not mix in.
  fs::remove_all(plan.dir);
  fs::create_directories(plan.dir);
  for (int lr = 0; lr < a.local_world_size; ++lr) {
    fs::path rank_dir = plan.dir / std::to_string(lr);
    // One mkdir each: the attempt directory was just made, and it is empty.
    fs::create_directory(rank_dir);
    eo.error_files.push_back((rank_dir / "error.json").string());
    eo.stack_files.push_back((rank_dir / "stacks.txt").string());
    plan.logs.push_back(plan_rank_logs(config, rank_dir, lr, a.rank_offset + lr, node.host));
  }
  for (int lr = 0; lr < a.local_world_size; ++lr) {
    supervisor::SpawnSpec s;
    s.argv = config.worker_command;
    // torchrun's macros: ${local_rank} in any argument (not the program).
    for (size_t i = 1; i < s.argv.size(); ++i) {
      s.argv[i] = substitute_template(s.argv[i], {{"local_rank", std::to_string(lr)}});
    }
    plan.env.push_back(worker_env(node.base, a, eo, lr));
    s.env = to_envp(plan.env.back());
    if (static_cast<size_t>(lr) < node.cpu_sets.size()) {
      s.cpu_affinity = node.cpu_sets[static_cast<size_t>(lr)];
    }
    plan.specs.push_back(std::move(s));
  }
  plan.error_files = std::move(eo.error_files);
  plan.stack_files = std::move(eo.stack_files);
  return plan;
}

}  // namespace elasticrun::agent
