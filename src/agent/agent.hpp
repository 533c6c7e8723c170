// The per-node agent: hosts or joins the store, starts the node's workers,
// watches them, forwards signals, restarts after failures, and reports.
//
// One libuv loop carries every event: child exits (SIGCHLD), forwarded
// signals, and the shutdown timer. The embedded store, when this node hosts
// it, runs its own loop on a thread of its own, so that thousands of worker
// connections never delay supervision and vice versa.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu_watch.hpp"
#include "agent/host_discovery.hpp"
#include "agent/numa_binding.hpp"
#include "agent/spot_watch.hpp"
#include "agent/warm_start.hpp"
#include "elastic/policy.hpp"
#include "events/event_log.hpp"
#include "health/log_rules.hpp"
#include "health/progress_monitor.hpp"
#include "health/specs.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::agent {

struct AgentConfig {
  // Full argv of every worker: "<python> -u [-m] script args..." or the program.
  std::vector<std::string> worker_command;
  std::string script_name;  // for the failure report's title
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string role = "default";
  std::string run_id = "none";
  int max_restarts = 0;
  // --monitor-interval: how often the attempt samples its workers' progress.
  std::chrono::milliseconds monitor_interval{100};
  std::chrono::milliseconds shutdown_timeout{30000};
  // Signals forwarded to the workers (then the run ends with that signal).
  std::vector<int> signals_to_handle;
  // Signal that stops workers when the agent stops them (failure, restart).
  int shutdown_signal = 15;

  // Store and rendezvous. standalone: host a store on a free port of
  // localhost, a fresh one per attempt. Otherwise node 0 hosts the store on
  // master_addr:master_port and the others connect to it.
  bool standalone = true;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds exit_barrier_timeout{std::chrono::seconds(300)};

  // Dynamic rendezvous (--rdzv-backend c10d with more than one node): the
  // node's place comes from rounds on the store at rdzv.store_host:port.
  bool dynamic = false;
  rendezvous::RendezvousConfig rdzv;
  // Whether this agent hosts the rendezvous store: kAuto when the endpoint
  // is an address of this machine (the first agent there to bind it wins),
  // as torchrun's c10d backend does; --rdzv-conf is_host=1/0 forces it.
  enum class HostStore { kAuto, kYes, kNo };
  HostStore host_store = HostStore::kAuto;
  // The elastic policy the leader applies.
  elastic::PolicyConfig policy;
  // After a scale event, how long workers get to checkpoint and exit.
  std::chrono::milliseconds graceful_shutdown_timeout{std::chrono::seconds(60)};
  // --inprocess-restart (dynamic jobs): workers whose SDK re-forms in
  // process park when their round ends and continue in the next with its
  // assignment; only local ranks whose process is gone start again
  // (docs/inprocess.md). The deadline to park is the stop's grace.
  bool inprocess_restart = false;

  // Base directory of the per-attempt log/error directories; empty: a temp dir.
  std::string log_dir;
  // torchrun's --redirects and --tee, per local rank: bit 1 stdout, bit 2
  // stderr. Missing ranks mean 0.
  std::vector<int> redirects;
  std::vector<int> tee;
  // --local-ranks-filter: only these ranks' console output is shown.
  std::optional<std::set<int>> local_ranks_filter;
  // Prefix of tee'd console lines; ${role_name} ${rank} ${local_rank} ${hostname}.
  std::string log_line_prefix_template = "[${role_name}${local_rank}]:";
  // torchrun's --duplicate-stdout/stderr-filters: tee'd lines containing any
  // of these also go to attempt_<n>/filtered_stdout.log (filtered_stderr.log).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  bool virtual_local_rank = false;
  // Where to write the agent's own error file (its TORCHELASTIC_ERROR_FILE).
  std::string agent_error_file;
  // hyperpodrun's --pre-train-script / --post-train-script with their args:
  // run to completion before each attempt's workers start and after they
  // exit. Empty: none. A failing pre-train script fails the attempt.
  std::vector<std::string> pre_train_command;
  std::vector<std::string> post_train_command;
  // --warm-start (Python workers only).
  WarmStartConfig warm_start;
  // --numa-binding: each local rank's worker runs on CPUs near its GPU
  // (numa_binding.hpp), worked out once, before the rendezvous.
  std::optional<NumaMode> numa_binding;
  // Where --numa-binding reads sys/ and proc/: "/", except in the
  // integration suite (ELASTICRUN_TEST_SYSFS_ROOT).
  std::string numa_root = "/";
  // The health monitors over the SDK's progress (docs/health.md).
  health::ProgressConfig progress;
  // The job config's log rules, compiled once: every rule reads local rank
  // 0's output (as HyperPod's agent watches only local rank 0), and the
  // faultOnMatch rules every rank's (an out-of-memory error on rank 3 is as
  // fatal as on rank 0). Null: no rule of that kind.
  std::shared_ptr<const health::LogRules::Compiled> rank0_rules;
  std::shared_ptr<const health::LogRules::Compiled> every_rank_rules;
  // HyperPod's restart policy (runPolicy.restartPolicy, jobMaxRetryCount):
  // when set, it decides each failure's restart instead of --max-restarts
  // alone; restart_cap is --max-restarts when it was given.
  std::optional<health::RestartPolicySpec> restart_policy;
  std::optional<int> restart_cap;
  // --gpu-health: the driver's error reports of the workers' GPUs.
  GpuHealthConfig gpu_health;
  // The event log (docs/events.md): --event-log's file, whether each line
  // also goes to stderr (--event-log-handler console), this agent's node id.
  events::LogOptions event_log;
  // The HTTP server of /metrics and the control API (docs/api.md):
  // --server-port or --metrics-port on --server-host; no port: none.
  std::optional<int> serve_port;
  std::string serve_host = "127.0.0.1";
  // --spot-notice-url's watch; no URL: none.
  SpotNoticeOptions spot_notice;
  // --host-discovery-script (dynamic jobs); no script: every host allowed.
  HostDiscoveryOptions host_discovery;
  // --memory-tier-limit (docs/memory-tier.md): the node's memory tier holds
  // at most this (nullopt: what its file system has free); off: no tier.
  bool memory_tier = true;
  std::optional<uint64_t> memory_tier_limit;
  // --memory-replicas, --memory-replication-rate (dynamic jobs): how many
  // peers hold a replica of this node's sharded state; bytes a second.
  int memory_replicas = 1;
  uint64_t memory_replication_rate = 0;
  // --data-cache-limit (docs/memory-tier.md, "Dataset cache"): the node's
  // dataset cache holds at most this (nullopt: what its file system has
  // free); off: no cache.
  bool data_cache = true;
  std::optional<uint64_t> data_cache_limit;
  // One-line notes printed once before the workers start.
  std::vector<std::string> notes;
  // Set in every worker's (and hook's) environment on top of the agent's own.
  std::map<std::string, std::string> worker_env;
};

// Runs the job on this node; returns the process exit code (0 all workers
// succeeded; 1 workers failed; 128+N the run was ended by signal N).
int run_agent(const AgentConfig& config);

}  // namespace elasticrun::agent
