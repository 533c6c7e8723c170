// From what the user asked (cli::LaunchConfig, the flags as torchrun
// parses them) to what the agent does (AgentConfig): the worker command,
// the rendezvous settings of --rdzv-conf, the elastic policy, per-rank log
// plans, the hooks, and the validation that needs several flags at once.
//
// Pure apart from reading the environment map it is given and looking
// programs up in that map's PATH: the launcher's main only parses, calls
// plan_agent and run_agent, and maps errors to exit codes.
#pragma once

#include <map>
#include <string>

#include "agent/agent.hpp"
#include "cli/launch_config.hpp"

namespace elasticrun::agent {

using Environment = std::map<std::string, std::string>;

// Throws ConfigError naming the flag (or --rdzv-conf key) when the flags
// contradict each other or a value the parser could not judge alone is
// wrong (a node rank outside the nodes, an unknown rendezvous backend).
// `env` is the launcher's environment: PATH and PYTHON_EXEC choose the
// workers' interpreter, TORCHELASTIC_ERROR_FILE the agent's error file,
// ELASTICRUN_TEST_SYSFS_ROOT the root under which --numa-binding and GPU
// health read the machine, ELASTICRUN_NVML_LIBRARY the NVML that GPU health
// loads (both for tests).
AgentConfig plan_agent(const cli::LaunchConfig& config, const Environment& env);

// The CPUs this process may run on (--nproc-per-node cpu and auto).
int usable_cpu_count();
// The CUDA GPUs the workers will see (--nproc-per-node gpu and auto),
// without initialising CUDA in the launcher.
int visible_gpu_count(const Environment& env);

}  // namespace elasticrun::agent
