// elasticrun: the per-node launcher, a drop-in for torchrun.
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <set>

#include "agent/agent.hpp"
#include "agent/cuda_devices.hpp"
#include "agent/worker_env.hpp"
#include "cli/parse.hpp"
#include "elastic/policy.hpp"
#include "elasticrun/errors.hpp"
#include "util/logging.hpp"

namespace {

using namespace elasticrun;

constexpr int kExitUsage = 2;

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

// Test-only: the integration suite points the GPU and NUMA discovery at a
// fake tree (docs/numa-binding.md).
std::filesystem::path discovery_root(const std::map<std::string, std::string>& env) {
  auto root = env.find("ELASTICRUN_TEST_SYSFS_ROOT");
  return root != env.end() && !root->second.empty() ? root->second : "/";
}

// --nproc-per-node gpu: the GPUs the workers will see, without initialising
// CUDA in the launcher.
int gpu_count(const std::map<std::string, std::string>& env) {
  return agent::cuda_device_count(discovery_root(env), env);
}

std::string find_in_path(const std::string& name, const std::map<std::string, std::string>& env) {
  auto path = env.find("PATH");
  if (path == env.end()) return {};
  size_t start = 0;
  while (start <= path->second.size()) {
    size_t end = path->second.find(':', start);
    if (end == std::string::npos) end = path->second.size();
    std::filesystem::path candidate =
        std::filesystem::path(path->second.substr(start, end - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

// torchrun runs workers with its own interpreter (sys.executable) unless
// PYTHON_EXEC says otherwise; a native launcher has none, so it takes the
// python3 (then python) that PATH finds, which in an activated venv or conda
// env is that environment's.
std::string python_executable(const std::map<std::string, std::string>& env) {
  auto exec = env.find("PYTHON_EXEC");
  if (exec != env.end() && !exec->second.empty()) return exec->second;
  for (const char* name : {"python3", "python"}) {
    std::string p = find_in_path(name, env);
    if (!p.empty()) return p;
  }
  throw ConfigError(
      "no python3 or python on PATH to run the training script; set PYTHON_EXEC "
      "or use --no-python");
}

std::vector<std::string> worker_command(const cli::LaunchConfig& c,
                                        const std::map<std::string, std::string>& env) {
  std::vector<std::string> cmd;
  if (c.no_python) {
    cmd.push_back(c.training_script);
  } else if (c.run_path) {
    cmd = {python_executable(env), "-u", "-c",
           "import runpy, sys; sys.argv = sys.argv[1:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__')",
           c.training_script};
  } else {
    cmd = {python_executable(env), "-u"};
    if (c.module) cmd.push_back("-m");
    cmd.push_back(c.training_script);
  }
  cmd.insert(cmd.end(), c.training_script_args.begin(), c.training_script_args.end());
  return cmd;
}

double conf_seconds(const std::map<std::string, std::string>& conf, const std::string& key,
                    double fallback) {
  auto it = conf.find(key);
  if (it == conf.end()) return fallback;
  const double v = cli::parse_double("--rdzv-conf " + key, it->second);
  if (v < 0) throw ConfigError("--rdzv-conf " + key + "=" + it->second + ": must not be negative");
  return v;
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string random_token() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 6; ++i) s += kChars[rd() % (sizeof(kChars) - 1)];
  return s;
}

// --rdzv-backend c10d over several nodes: the rendezvous settings, from the
// endpoint, --rdzv-conf (torchrun's keys where they mean the same) and the
// elastic sizes.
void dynamic_config(const cli::LaunchConfig& c, agent::AgentConfig& a) {
  const auto& conf = c.rdzv_conf;
  for (const auto& [key, value] : conf) {
    static const std::set<std::string> kKnown = {
        "join_timeout",       "last_call_timeout", "close_timeout",       "timeout",
        "read_timeout",       "is_host",           "keep_alive_interval", "keep_alive_max_attempt",
        "heartbeat_interval", "missed_heartbeats", "rejoin_timeout",      "use_libuv"};
    if (!kKnown.count(key)) {
      throw ConfigError("--rdzv-conf " + key + "=" + value +
                        ": unknown key for the c10d backend (known: join_timeout, "
                        "last_call_timeout, keep_alive_interval, keep_alive_max_attempt, "
                        "heartbeat_interval, missed_heartbeats, rejoin_timeout, is_host, "
                        "read_timeout)");
    }
  }
  const cli::HostPort ep = cli::parse_endpoint("--rdzv-endpoint", c.rdzv_endpoint, 29400);
  auto& r = a.rdzv;
  r.store_host = ep.host;
  r.store_port = ep.port;
  r.run_id = c.rdzv_id;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  r.host = c.local_addr.value_or(name);
  r.node_id = r.host + "-" + std::to_string(::getpid()) + "-" + random_token();
  r.local_world_size = c.nproc_per_node;
  r.join_timeout = ms(conf_seconds(conf, "join_timeout", 600));
  r.last_call_timeout = ms(conf_seconds(conf, "last_call_timeout", 1));
  r.heartbeat_interval =
      ms(conf_seconds(conf, "heartbeat_interval", conf_seconds(conf, "keep_alive_interval", 1)));
  if (r.heartbeat_interval.count() < 10) {
    throw ConfigError("--rdzv-conf heartbeat_interval: at least 0.01 s");
  }
  const double missed =
      conf_seconds(conf, "missed_heartbeats", conf_seconds(conf, "keep_alive_max_attempt", 5));
  r.missed_heartbeats = std::max(1, static_cast<int>(missed));
  r.rejoin_timeout = ms(conf_seconds(conf, "rejoin_timeout", 30));
  r.store_timeout = ms(conf_seconds(conf, "read_timeout", 60));
  if (auto it = conf.find("is_host"); it != conf.end()) {
    const std::string v = it->second;
    if (v == "1" || v == "true" || v == "True" || v == "yes") {
      a.host_store = agent::AgentConfig::HostStore::kYes;
    } else if (v == "0" || v == "false" || v == "False" || v == "no") {
      a.host_store = agent::AgentConfig::HostStore::kNo;
    } else {
      throw ConfigError("--rdzv-conf is_host=" + v + ": expected 1 or 0");
    }
  }
  const cli::ElasticOptions& e = c.elastic;
  a.policy.min_replicas = e.min_replicas;
  a.policy.max_replicas = e.max_replicas;
  a.policy.increment_step = e.replica_increment_step;
  a.policy.discrete_values = e.replica_discrete_values;
  a.policy.scaling_timeout = ms(e.scaling_timeout);
  a.policy.faulty_scale_down_timeout = ms(e.faulty_scale_down_timeout);
  a.policy.min_stable_period = ms(e.min_stable_period);
  a.policy.max_stable_period = ms(e.max_stable_period);
  a.policy.validate();
  a.graceful_shutdown_timeout = ms(e.graceful_shutdown_timeout);
  r.sizes = a.policy;
  r.faulty_scale_down_timeout = a.policy.faulty_scale_down_timeout;
  r.max_restarts = c.max_restarts;
}

agent::AgentConfig agent_config(const cli::LaunchConfig& c,
                                const std::map<std::string, std::string>& env) {
  agent::AgentConfig a;
  a.worker_command = worker_command(c, env);
  if (c.warm_start && !c.no_python) {
    // The part of the worker's argv that becomes sys.argv: the file or module on.
    a.warm_start.enabled = true;
    a.warm_start.python = a.worker_command[0];
    a.warm_start.mode = c.run_path ? "run_path" : c.module ? "module" : "script";
    a.warm_start.argv_offset = c.run_path ? 4 : c.module ? 3 : 2;
    a.warm_start.imports = c.warm_start_imports;
  }
  a.script_name = c.training_script;
  a.nproc_per_node = c.nproc_per_node;
  a.nnodes = c.effective_nnodes();
  a.node_rank = c.node_rank;
  a.role = c.role;
  a.run_id = c.rdzv_id;
  a.max_restarts = c.max_restarts;
  a.shutdown_timeout = std::chrono::seconds(c.shutdown_timeout);
  a.signals_to_handle = c.signals_to_handle;
  a.shutdown_signal = c.shutdown_signal;
  a.master_addr = c.master_addr;
  a.master_port = c.master_port;
  a.virtual_local_rank = c.virtual_local_rank;
  if (c.numa_binding) {
    a.numa_binding = agent::numa_mode_from_string(*c.numa_binding);  // validated by the parser
    a.numa_root = discovery_root(env).string();
  }
  a.log_dir = c.log_dir.value_or("");
  for (int r = 0; r < c.nproc_per_node; ++r) {
    a.redirects.push_back(c.redirects.for_rank(r));
    a.tee.push_back(c.tee.for_rank(r));
  }
  a.local_ranks_filter = c.local_ranks_filter;
  if (c.log_line_prefix_template) a.log_line_prefix_template = *c.log_line_prefix_template;
  a.duplicate_stdout_filters = c.duplicate_stdout_filters;
  a.duplicate_stderr_filters = c.duplicate_stderr_filters;
  a.notes = c.notes;
  if (c.pre_train_script) {
    a.pre_train_command = {*c.pre_train_script};
    a.pre_train_command.insert(a.pre_train_command.end(), c.pre_train_args.begin(),
                               c.pre_train_args.end());
  }
  if (c.post_train_script) {
    a.post_train_command = {*c.post_train_script};
    a.post_train_command.insert(a.post_train_command.end(), c.post_train_args.begin(),
                                c.post_train_args.end());
  }
  auto err = env.find("TORCHELASTIC_ERROR_FILE");
  if (err != env.end()) a.agent_error_file = err->second;

  if (c.rdzv_backend == "static") {
    a.standalone = false;
    if (c.node_rank < 0 || c.node_rank >= a.nnodes) {
      throw ConfigError("--node-rank " + std::to_string(c.node_rank) + " is not in [0, " +
                        std::to_string(a.nnodes) + ")");
    }
  } else if (c.rdzv_backend == "c10d" && c.nnodes_max == 1) {
    // One node: nobody to rendezvous with; host a fresh store per attempt.
    a.standalone = true;
  } else if (c.rdzv_backend == "c10d") {
    a.standalone = false;
    a.dynamic = true;
    dynamic_config(c, a);
  } else {
    throw ConfigError("--rdzv-backend " + c.rdzv_backend +
                      " is not supported; use c10d (or its synonym elasticrun), static, or "
                      "--standalone");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const auto env = agent::current_environment();
  cli::LaunchConfig config;
  agent::AgentConfig agent_cfg;
  try {
    config = cli::parse_launch_args(std::vector<std::string>(argv + 1, argv + argc), env,
                                    cpu_count(), gpu_count(env));
    agent_cfg = agent_config(config, env);
  } catch (const cli::HelpRequested& h) {
    std::fputs(h.text.c_str(), stdout);
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "elasticrun: error: " << e.what() << "\n" << cli::usage();
    return kExitUsage;
  }
  // torchrun exports the list to its workers (and our env map is what they inherit).
  std::string handled;
  for (int sig : config.signals_to_handle) {
    handled += (handled.empty() ? "" : ",") + cli::signal_name(sig);
  }
  ::setenv("TORCHELASTIC_SIGNALS_TO_HANDLE", handled.c_str(), 1);
  // The worker SDK reads per-world-size overrides from the job config file.
  if (config.elastic.config_file) {
    ::setenv("ELASTICRUN_CONFIG_FILE", config.elastic.config_file->c_str(), 1);
  }
  try {
    return agent::run_agent(agent_cfg);
  } catch (const ConfigError& e) {
    std::cerr << "elasticrun: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "elasticrun: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "elasticrun: internal error: " << e.what() << "\n";
    return 1;
  }
}
