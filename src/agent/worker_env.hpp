// The environment and command line of each worker, as torchrun builds them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::agent {

// Where this node sits in the job for one attempt (one rendezvous round).
struct Assignment {
  int group_rank = 0;        // this node's rank among nodes
  int group_world_size = 1;  // number of nodes
  int local_world_size = 1;  // workers on this node
  int rank_offset = 0;       // global rank of local rank 0
  int world_size = 1;        // workers in the job
  std::string master_addr;   // the store workers use
  int master_port = 0;
  bool use_agent_store = true;
  int restart_count = 0;
  uint64_t generation = 0;  // dynamic rendezvous round; 0 for static and standalone
};

struct WorkerEnvOptions {
  std::string role = "default";
  std::string run_id;
  int max_restarts = 0;
  // TORCHELASTIC_ERROR_FILE of each local rank (torchrun: <attempt dir>/<local_rank>/error.json).
  std::vector<std::string> error_files;
  // --virtual-local-rank: every worker sees LOCAL_RANK=0 and only its own GPU.
  bool virtual_local_rank = false;
  // Where each local rank's SDK writes its Python stacks when the agent
  // sends stack_signal (ELASTICRUN_STACK_FILE, ELASTICRUN_STACK_SIGNAL).
  std::vector<std::string> stack_files;
  int stack_signal = 0;
  // The hang limit, when fixed (--hang-timeout SECONDS): ELASTICRUN_HANG_TIMEOUT
  // tells the SDK (elasticrun.process_group_timeout()), and NCCL's watchdog
  // monitor gets TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC no shorter than it, unless set.
  std::optional<double> hang_seconds;
};

// The environment of local rank `local_rank`: the agent's own environment
// (base) with torchrun's variables set on top. TORCH_NCCL_ASYNC_ERROR_HANDLING
// keeps the base's value, else 1. (OMP_NUM_THREADS=1 is the agent's to put in
// base, when it runs more than one worker and the variable is unset.)
std::map<std::string, std::string> worker_env(const std::map<std::string, std::string>& base,
                                              const Assignment& a, const WorkerEnvOptions& o,
                                              int local_rank);

// Python's string.Template(text).safe_substitute(vars): "$name" and
// "${name}" become the value when name is in vars, "$$" becomes "$", and
// anything else is left as it is. torchrun applies it to every worker
// argument with local_rank, and to the console prefix template.
std::string substitute_template(const std::string& text,
                                const std::map<std::string, std::string>& vars);

// "NAME=value" list for execve.
std::vector<std::string> to_envp(const std::map<std::string, std::string>& env);

// The agent's environment as a map.
std::map<std::string, std::string> current_environment();

}  // namespace elasticrun::agent
