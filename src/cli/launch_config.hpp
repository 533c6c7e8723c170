// What `elasticrun` was asked to do: every torchrun 2.x flag, hyperpodrun's
// extras, and the training command, typed and validated.
//
// parse_launch_args (cli/parse.hpp) fills it in the order torchrun's run.py
// does: flags, then PET_<NAME> environment fallbacks, then derivations
// (--standalone, single-node static -> c10d, the default master port, the
// static rendezvous endpoint). Fields hold the values the agent should use;
// the *_spec strings keep what the user wrote, for messages.
#pragma once

#include <csignal>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli/elastic_options.hpp"
#include "cli/health_options.hpp"

namespace elasticrun::cli {

// Which of a worker's standard streams a setting applies to; torchrun's Std.
enum StdBits : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

// A --redirects or --tee setting. torchrun takes either one value for every
// local rank ("3") or a map ("0:3,1:0"); in a map, ranks not named get NONE.
// So a single value is {default_bits=value, per_rank={}} and a map is
// {default_bits=kStdNone, per_rank=map}.
struct StdStreams {
  int default_bits = kStdNone;
  std::map<int, int> per_rank;

  int for_rank(int local_rank) const;
  bool operator==(const StdStreams&) const = default;
};

struct HostPort {
  std::string host;
  int port = 0;
};

struct LaunchConfig {
  // --- Nodes and workers.
  // --nnodes N or MIN:MAX, or --min-replicas/--max-replicas, or the job
  // config: always equal to elastic.min_replicas/max_replicas. With c10d a
  // MIN<MAX range is elastic; the static backend cannot scale and runs
  // exactly nnodes_min nodes (effective_nnodes(), with a note). nnodes_spec is
  // what --nnodes said, else "MIN:MAX" of the replicas.
  int nnodes_min = 1;
  int nnodes_max = 1;
  std::string nnodes_spec = "1:1";
  // Resolved worker count; nproc_per_node_spec is "4", "auto", "cpu" or "gpu".
  int nproc_per_node = 1;
  std::string nproc_per_node_spec = "1";

  // --- Rendezvous. rdzv_backend is one of static, c10d, etcd, etcd-v2 ("elasticrun"
  // is accepted as c10d). rdzv_endpoint is derived for static ("master_addr:master_port")
  // and for --standalone ("localhost:0"); for c10d an empty one means localhost:29400.
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;

  // --- Restarts and supervision.
  int max_restarts = 0;
  double monitor_interval = 0.1;  // seconds
  std::string start_method = "spawn";
  std::string event_log_handler = "null";  // "console": events to stderr too
  std::string event_log;                   // --event-log FILE; empty: none
  std::string role = "default";

  // --- How the command is built: `python -u [-m] script args`, or the script itself.
  bool module = false;
  bool no_python = false;
  // runpy.run_path(script) in a Python worker; when set, module and no_python are false.
  bool run_path = false;

  // --- Logs.
  std::optional<std::string> log_dir;
  StdStreams redirects;
  StdStreams tee;
  // --log-line-prefix-template, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; unset
  // means torchrun's "[${role_name}${local_rank}]:".
  std::optional<std::string> log_line_prefix_template;
  std::optional<std::set<int>> local_ranks_filter;  // unset: every rank reaches the console
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // --- Static rendezvous (caffe2.distributed.launch compatibility).
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::optional<std::string> local_addr;

  std::optional<std::string> logs_specs;    // a Python entry point: accepted, noted
  std::optional<std::string> numa_binding;  // node, socket, exclusive, core-complex
  std::vector<int> signals_to_handle = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // --shutdown-timeout, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30.
  int shutdown_timeout = 30;  // seconds
  bool virtual_local_rank = false;

  // --- hyperpodrun extras. The pre/post-train scripts run once per (re)start,
  // before and after the workers; their args are split like a shell would.
  int shutdown_signal = SIGTERM;
  std::optional<std::string> pre_train_script;
  std::vector<std::string> pre_train_args;
  std::optional<std::string> post_train_script;
  std::vector<std::string> post_train_args;
  std::string server_host = "127.0.0.1";
  int server_port = 8080;              // hyperpodrun's default; served only when given
  std::optional<int> metrics_port;     // --metrics-port
  std::string spot_notice_url;         // --spot-notice-url; empty: no watcher
  double spot_notice_interval = 5;     // --spot-notice-interval, seconds
  std::string host_discovery_script;   // --host-discovery-script; empty: every host allowed
  double host_discovery_interval = 1;  // --host-discovery-interval, seconds
  // --memory-tier-limit: the most bytes of the node's memory tier; nullopt:
  // what its file system has free; 0: no memory tier.
  std::optional<uint64_t> memory_tier_limit;
  int memory_replicas = 1;  // --memory-replicas
  // --data-cache-limit: nullopt: auto (what /dev/shm has free); 0: no cache.
  std::optional<uint64_t> data_cache_limit;
  uint64_t memory_replication_rate = uint64_t{1}
                                     << 30;  // --memory-replication-rate, bytes/s; 0: no cap
  // Derived: where the agent serves /metrics and the HTTP API (--server-port
  // or --metrics-port, on --server-host); nullopt: no server.
  std::optional<int> serve_port;
  bool inprocess_restart = false;  // --inprocess-restart (docs/inprocess.md)
  // --warm-start: Python workers run in interpreters started ahead that have
  // imported warm_start_imports already.
  bool warm_start = false;
  std::vector<std::string> warm_start_imports = {"torch", "torch._dynamo"};

  // --- elasticrun's own: the elastic policy (--min-replicas ..., --config).
  ElasticOptions elastic;
  // --- and the health monitors (--hang-timeout ...).
  HealthOptions health;

  // --- The training command, exactly as given after the flags.
  std::string training_script;
  std::vector<std::string> training_script_args;

  // One line per flag that was accepted but does not apply (yet); the launcher
  // prints them as warnings before starting anything.
  std::vector<std::string> notes;

  // The node count of a static job (which cannot scale); an elastic (c10d)
  // job starts from it too.
  int effective_nnodes() const { return nnodes_min; }
};

// --- Value parsers. `what` names the flag (or the environment variable) in
// the ConfigError message; each throws ConfigError on malformed input.

// Python's int(): surrounding whitespace, a sign, '_' between digits.
int parse_int(std::string_view what, std::string_view text);
// Python's float() for finite values.
double parse_double(std::string_view what, std::string_view text);
// "N" or "MIN:MAX", with 0 < MIN <= MAX.
std::pair<int, int> parse_nnodes(std::string_view what, std::string_view text);
// torchrun's Std.from_str: "0".."3" or "R:V,R:V,..." (V in 0..3). Ranks may have
// more than one digit, which torchrun's regex does not allow (it stops at 9).
StdStreams parse_std_streams(std::string_view what, std::string_view text);
// torchrun's _parse_rendezvous_config: "k=v,k=v", keys and values stripped, neither empty.
std::map<std::string, std::string> parse_rdzv_conf(std::string_view what, std::string_view text);
// "0,1,2": non-negative local ranks. Empty text means no filter.
std::optional<std::set<int>> parse_local_ranks(std::string_view what, std::string_view text);
// "SIGTERM,SIGUSR1": signal names as Python's signal module spells them, or numbers.
std::vector<int> parse_signal_list(std::string_view what, std::string_view text);
int parse_signal(std::string_view what, std::string_view text);
// torchrun's --duplicate-*-filters: split on ',', ",," stands for a literal comma.
std::vector<std::string> parse_comma_list(std::string_view text);
// Splits "a 'b c' d\ e" into words like a POSIX shell (quotes, backslashes), without expansion.
std::vector<std::string> split_shell_words(std::string_view what, std::string_view text);
// torchrun's parse_rendezvous_endpoint: "host[:port]", "[v6]:port"; an empty
// endpoint is localhost:default_port; a missing port is default_port (-1: required).
HostPort parse_endpoint(std::string_view what, std::string_view text, int default_port);

// etcd's client port, the default of --rdzv-backend etcd and etcd-v2.
inline constexpr int kEtcdPort = 2379;
// An etcd cluster's endpoints: "host[:port]" (port 2379 by default), each
// optionally as a URL ("http://host:port", "https://host:port"), several
// separated by commas. `tls` is what the URLs said (nullopt: none said).
struct EtcdEndpoints {
  std::vector<HostPort> members;
  std::optional<bool> tls;
};
EtcdEndpoints parse_etcd_endpoints(std::string_view what, std::string_view text);

std::string signal_name(int signo);

// The configuration as one JSON object (test/tools/cli_dump prints it).
std::string to_json(const LaunchConfig& config);

}  // namespace elasticrun::cli
