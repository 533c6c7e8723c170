#include "agent/launch_plan.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>

#include "agent/cuda_devices.hpp"
#include "cli/parse.hpp"
#include "ctl/job_connection.hpp"
#include "elasticrun/errors.hpp"
#include "util/host_name.hpp"
#include "util/secret.hpp"

namespace elasticrun::agent {
namespace {

// Test-only: the integration suite points the GPU and NUMA discovery at a
// fake tree (docs/numa-binding.md).
std::filesystem::path discovery_root(const Environment& env) {
  auto root = env.find("ELASTICRUN_TEST_SYSFS_ROOT");
  return root != env.end() && !root->second.empty() ? root->second : "/";
}

std::string find_in_path(const std::string& name, const Environment& env) {
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

// The Python environment (a venv, a conda env) this launcher was installed
// into, if any: the directory above the one that holds the executable is
// one when it has pyvenv.cfg or conda-meta/. Empty otherwise (a build tree,
// /usr/bin).
std::filesystem::path own_environment_python() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto bin = exe.parent_path();
  const auto root = bin.parent_path();
  if (!std::filesystem::exists(root / "pyvenv.cfg", ec) &&
      !std::filesystem::is_directory(root / "conda-meta", ec)) {
    return {};
  }
  for (const char* name : {"python3", "python"}) {
    if (::access((bin / name).c_str(), X_OK) == 0) return bin / name;
  }
  return {};
}

// torchrun runs workers with its own interpreter (sys.executable) unless
// PYTHON_EXEC says otherwise. Ours, in that order: PYTHON_EXEC; the
// interpreter of the environment elasticrun was installed into (pip
// install into a venv: called by its path, unactivated, it still runs that
// venv's Python, as torchrun would); the python3 (then python) that PATH
// finds, which in an activated venv or conda env is that environment's.
std::string python_executable(const Environment& env) {
  auto exec = env.find("PYTHON_EXEC");
  if (exec != env.end() && !exec->second.empty()) return exec->second;
  if (auto own = own_environment_python(); !own.empty()) return own.string();
  for (const char* name : {"python3", "python"}) {
    std::string p = find_in_path(name, env);
    if (!p.empty()) return p;
  }
  throw ConfigError(
      "no python3 or python on PATH to run the training script; set PYTHON_EXEC "
      "or use --no-python");
}

std::vector<std::string> worker_command(const cli::LaunchConfig& c, const Environment& env) {
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

// --rdzv-conf keys of the c10d backend: torchrun's where they mean the same
// (join_timeout, last_call_timeout, keep_alive_*, read_timeout, is_host),
// ours beside them. Accepted and unused: close_timeout, timeout, use_libuv.
const std::set<std::string> kRdzvConfKeys = {
    "join_timeout",       "last_call_timeout", "close_timeout",       "timeout",
    "read_timeout",       "is_host",           "keep_alive_interval", "keep_alive_max_attempt",
    "heartbeat_interval", "missed_heartbeats", "rejoin_timeout",      "use_libuv",
    "secret_file",        "standby_endpoint"};

// --rdzv-conf keys of the etcd backends besides those: torchrun's etcd
// (protocol, cacert, cert, key) and etcd-v2 (ca_cert, ssl_cert,
// ssl_cert_key) spellings of the same four things, either name.
const std::set<std::string> kEtcdConfKeys = {"protocol", "cacert",   "cert",        "key",
                                             "ca_cert",  "ssl_cert", "ssl_cert_key"};

AgentConfig::HostStore host_store(const std::map<std::string, std::string>& conf) {
  auto it = conf.find("is_host");
  if (it == conf.end()) return AgentConfig::HostStore::kAuto;
  const std::string& v = it->second;
  if (v == "1" || v == "true" || v == "True" || v == "yes") return AgentConfig::HostStore::kYes;
  if (v == "0" || v == "false" || v == "False" || v == "no") return AgentConfig::HostStore::kNo;
  throw ConfigError("--rdzv-conf is_host=" + v + ": expected 1 or 0");
}

// --rdzv-backend c10d over several nodes: the rendezvous settings, from the
// endpoint, --rdzv-conf and the elastic sizes.
void plan_dynamic(const cli::LaunchConfig& c, AgentConfig& a) {
  const auto& conf = c.rdzv_conf;
  const bool on_etcd = c.rdzv_backend != "c10d";
  for (const auto& [key, value] : conf) {
    if (!kRdzvConfKeys.count(key) && !(on_etcd && kEtcdConfKeys.count(key))) {
      throw ConfigError("--rdzv-conf " + key + "=" + value + ": unknown key for the " +
                        c.rdzv_backend +
                        " backend (known: join_timeout, "
                        "last_call_timeout, keep_alive_interval, keep_alive_max_attempt, "
                        "heartbeat_interval, missed_heartbeats, rejoin_timeout, is_host, "
                        "read_timeout, secret_file, standby_endpoint" +
                        (on_etcd ? ", protocol, cacert, cert, key)" : ")"));
    }
  }
  auto& r = a.rdzv;
  if (on_etcd) {
    r.etcd =
        ctl::parse_job_address("--rdzv-endpoint", c.rdzv_endpoint, c.rdzv_id, c.rdzv_backend, conf)
            .etcd;
    if (conf.count("standby_endpoint")) {
      throw ConfigError(
          "--rdzv-conf standby_endpoint: not with etcd, which keeps its own replicas (give "
          "every member in --rdzv-endpoint)");
    }
  } else {
    const cli::HostPort ep = cli::parse_endpoint("--rdzv-endpoint", c.rdzv_endpoint, 29400);
    r.store_host = ep.host;
    r.store_port = ep.port;
  }
  r.run_id = c.rdzv_id;
  r.host = c.local_addr.value_or(util::host_name());
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
  // The job secret gates the rendezvous store: the file's path comes from
  // --rdzv-conf secret_file or $ELASTICRUN_SECRET_FILE, its bytes go
  // nowhere but the handshake.
  std::optional<std::string> secret_file;
  if (auto it = conf.find("secret_file"); it != conf.end()) secret_file = it->second;
  r.secret = util::job_secret(secret_file, "--rdzv-conf secret_file").value_or("");
  a.host_store = on_etcd ? AgentConfig::HostStore::kNo : host_store(conf);
  if (auto it = conf.find("standby_endpoint"); it != conf.end()) {
    // Where the store's standby serves: fixed in advance, so that every
    // agent knows where to go when the store's host is lost.
    const cli::HostPort sb = cli::parse_endpoint("--rdzv-conf standby_endpoint", it->second, -1);
    if (sb.port == 0)
      throw ConfigError("--rdzv-conf standby_endpoint=" + it->second + ": give a port");
    if (sb.host == r.store_host && sb.port == r.store_port) {
      throw ConfigError("--rdzv-conf standby_endpoint=" + it->second +
                        " is the rendezvous endpoint itself: give another host or port");
    }
    r.standby_host = sb.host;
    r.standby_port = sb.port;
    if (sb.host == r.store_host) {
      a.notes.push_back("the store's standby (" + it->second +
                        ") is on the store's own host: it survives the loss of the agent that "
                        "hosts the store, not of the host");
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
  r.exclusion.faults = c.health.exclude_after;
  r.exclusion.window = ms(c.health.exclude_window);
  r.exclusion.cooldown = ms(c.health.exclude_cooldown);
  r.straggler.factor = c.health.straggler_factor;
  r.straggler.points = c.health.straggler_points;
  r.restart_policy = c.health.restart_policy;
  if (c.health.max_restarts_given) r.restart_cap = c.max_restarts;
}

// Where the node's place comes from: fixed by the flags (static,
// standalone) or from rounds (c10d over several nodes).
void plan_rendezvous(const cli::LaunchConfig& c, AgentConfig& a) {
  if (c.rdzv_backend == "static") {
    a.standalone = false;
    if (c.node_rank < 0 || c.node_rank >= a.nnodes) {
      throw ConfigError("--node-rank " + std::to_string(c.node_rank) + " is not in [0, " +
                        std::to_string(a.nnodes) + ")");
    }
    if (std::getenv(util::kSecretFileEnv) || c.rdzv_conf.count("secret_file")) {
      a.notes.push_back(
          "the job secret is not used: it gates a dynamic job's rendezvous store (--rdzv-backend "
          "c10d), and a static job's store serves PyTorch workers, which cannot authenticate "
          "(docs/security.md)");
    }
  } else if (c.nnodes_max == 1) {
    // One node: nobody to rendezvous with; host a fresh store per attempt.
    a.standalone = true;
    if (c.rdzv_backend != "c10d") {
      a.notes.push_back("--rdzv-backend " + c.rdzv_backend +
                        ": not used by a job of one node, which needs no rendezvous");
    }
  } else {
    // c10d on elasticrun's store, or etcd and etcd-v2 on an etcd cluster:
    // one rendezvous protocol over either (docs/protocol.md).
    a.standalone = false;
    a.dynamic = true;
    plan_dynamic(c, a);
  }
}

health::ProgressConfig plan_progress(const cli::HealthOptions& h) {
  health::ProgressConfig p;
  switch (h.hang) {
    case cli::HealthOptions::Hang::kAuto:
      p.hang.mode = health::HangLimit::Mode::kAuto;
      break;
    case cli::HealthOptions::Hang::kOff:
      p.hang.mode = health::HangLimit::Mode::kOff;
      break;
    case cli::HealthOptions::Hang::kFixed:
      p.hang.mode = health::HangLimit::Mode::kFixed;
      p.hang.fixed = ms(h.hang_seconds);
      break;
  }
  p.startup = ms(h.startup_timeout);
  p.non_finite_loss = h.non_finite_loss;
  return p;
}

std::vector<std::string> hook_command(const std::optional<std::string>& script,
                                      const std::vector<std::string>& args) {
  if (!script) return {};
  std::vector<std::string> cmd = {*script};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

}  // namespace

AgentConfig plan_agent(const cli::LaunchConfig& c, const Environment& env) {
  AgentConfig a;
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
  // torchrun accepts 0 (a busy loop); a tenth of a millisecond is as good.
  a.monitor_interval = std::max(std::chrono::milliseconds(1), ms(c.monitor_interval));
  a.shutdown_timeout = std::chrono::seconds(c.shutdown_timeout);
  a.signals_to_handle = c.signals_to_handle;
  a.shutdown_signal = c.shutdown_signal;
  a.master_addr = c.master_addr;
  a.master_port = c.master_port;
  a.virtual_local_rank = c.virtual_local_rank;
  if (c.numa_binding) {
    a.numa_binding = numa_mode_from_string(*c.numa_binding);  // validated by the parser
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
  a.event_log.path = c.event_log;
  a.event_log.console = c.event_log_handler == "console";
  a.serve_port = c.serve_port;
  a.serve_host = c.server_host;
  a.spot_notice.url = c.spot_notice_url;
  a.spot_notice.interval = ms(c.spot_notice_interval);
  a.host_discovery.script = c.host_discovery_script;
  a.host_discovery.interval = ms(c.host_discovery_interval);
  a.memory_tier = c.memory_tier_limit != uint64_t{0};
  a.memory_tier_limit = c.memory_tier_limit;
  a.memory_replicas = c.memory_replicas;
  a.memory_replication_rate = c.memory_replication_rate;
  a.data_cache = c.data_cache_limit != uint64_t{0};
  a.data_cache_limit = c.data_cache_limit;
  a.progress = plan_progress(c.health);
  // Compiled here, so that a pattern RE2 refuses exits 2 before anything starts.
  if (!c.health.log_rules.empty()) {
    a.rank0_rules = health::LogRules::compile(c.health.log_rules);
    std::vector<health::LogRuleSpec> fault_rules;
    for (const auto& r : c.health.log_rules) {
      if (r.fault_on_match) fault_rules.push_back(r);
    }
    if (!fault_rules.empty()) a.every_rank_rules = health::LogRules::compile(fault_rules);
  }
  a.restart_policy = c.health.restart_policy;
  if (c.health.max_restarts_given) a.restart_cap = c.max_restarts;
  a.gpu_health.enabled = c.health.gpu == cli::HealthOptions::Gpu::kAuto;
  a.gpu_health.root = discovery_root(env).string();
  if (auto lib = env.find("ELASTICRUN_NVML_LIBRARY"); lib != env.end() && !lib->second.empty()) {
    a.gpu_health.library = lib->second;
  }
  a.pre_train_command = hook_command(c.pre_train_script, c.pre_train_args);
  a.post_train_command = hook_command(c.post_train_script, c.post_train_args);
  if (auto err = env.find("TORCHELASTIC_ERROR_FILE"); err != env.end()) {
    a.agent_error_file = err->second;
  }
  // torchrun exports the list of handled signals to its workers.
  std::string handled;
  for (int sig : c.signals_to_handle) {
    handled += (handled.empty() ? "" : ",") + cli::signal_name(sig);
  }
  a.worker_env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = handled;
  // The worker SDK reads per-world-size overrides from the job config file.
  if (c.elastic.config_file) a.worker_env["ELASTICRUN_CONFIG_FILE"] = *c.elastic.config_file;
  plan_rendezvous(c, a);
  if (!a.host_discovery.script.empty() && !a.dynamic) {
    throw ConfigError(
        "--host-discovery-script needs an elastic job (--rdzv-backend c10d and --nnodes "
        "MIN:MAX or more than one node): a fixed job has no rounds to admit hosts to");
  }
  a.inprocess_restart = c.inprocess_restart && a.dynamic;
  // The event log's lines name the agent as its heartbeat does; a fixed
  // job's agent has no heartbeat, and gets an id made the same way.
  if (a.dynamic) {
    a.event_log.node_id = a.rdzv.node_id;
    a.event_log.host = a.rdzv.host;
  } else {
    a.event_log.host = c.local_addr.value_or(util::host_name());
    a.event_log.node_id =
        a.event_log.host + "-" + std::to_string(::getpid()) + "-" + random_token();
  }
  return a;
}

int usable_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

int visible_gpu_count(const Environment& env) {
  return cuda_device_count(discovery_root(env), env);
}

}  // namespace elasticrun::agent
