#include "cli/flags.hpp"

#include <cassert>
#include <cctype>
#include <tuple>

#include "cli/flag_text.hpp"
#include "cli/launch_config.hpp"
#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::cli {

namespace {

constexpr bool kValue = true;
constexpr bool kSwitch = false;
constexpr bool kEnv = true;
constexpr bool kNoEnv = false;
constexpr Group kTorch = Group::kTorchrun;
constexpr Group kHyper = Group::kHyperPod;
constexpr Group kElastic = Group::kElastic;
constexpr Group kHealth = Group::kHealth;

// The converters of the flags that set one field from their text alone.
template <auto Field>
void set_text(LaunchConfig& c, const Raw& r) {
  c.*Field = r.text;
}
template <auto Field>
void set_switch(LaunchConfig& c, const Raw& r) {
  c.*Field = parse_switch(r);
}
template <auto Field>
void set_count(LaunchConfig& c, const Raw& r) {
  c.*Field = parse_count(r);
}
template <auto Field>
void set_port(LaunchConfig& c, const Raw& r) {
  c.*Field = parse_port(r);
}
template <auto Field>
void set_list(LaunchConfig& c, const Raw& r) {
  c.*Field = parse_comma_list(r.text);
}
template <auto Field>
void set_streams(LaunchConfig& c, const Raw& r) {
  c.*Field = parse_std_streams(r.origin, r.text);
}
template <auto Field>
void set_words(LaunchConfig& c, const Raw& r) {
  c.*Field = split_shell_words(r.origin, r.text);
}

// Order is --help order. Meanings follow torch/distributed/run.py (2.x); the
// words are ours, and say what elasticrun does where it differs.
const std::vector<FlagSpec> kFlags = {
    {Flag::kHelp, "-h", "--help", kSwitch, kNoEnv, kTorch, "", "", "Show this help and exit."},
    {Flag::kNnodes, "", "--nnodes", kValue, kEnv, kTorch, "N|MIN:MAX", "1:1",
     "Number of nodes, or a range MIN:MAX: an elastic job with --rdzv-backend c10d (static "
     "rendezvous cannot scale and runs MIN nodes). Same as --min-replicas/--max-replicas.",
     [](LaunchConfig& c, const Raw& r) {
       std::tie(c.nnodes_min, c.nnodes_max) = parse_nnodes(r.origin, r.text);
       c.nnodes_spec = r.text;
     }},
    {Flag::kNprocPerNode, "", "--nproc-per-node", kValue, kEnv, kTorch, "N|auto|cpu|gpu", "1",
     "Workers on this node: a number; gpu, one per visible CUDA GPU; cpu, one per usable CPU; "
     "auto, gpu if there is a GPU, else cpu. (xpu is not supported.)",
     set_text<&LaunchConfig::nproc_per_node_spec>},
    {Flag::kRdzvBackend, "", "--rdzv-backend", kValue, kEnv, kTorch, "BACKEND", "static",
     "Rendezvous backend: static, c10d, etcd or etcd-v2; elasticrun is a synonym of c10d.",
     set_text<&LaunchConfig::rdzv_backend>},
    {Flag::kRdzvEndpoint, "", "--rdzv-endpoint", kValue, kEnv, kTorch, "HOST[:PORT]", "",
     "Rendezvous endpoint; the c10d port defaults to 29400. With static and no endpoint, "
     "MASTER_ADDR:MASTER_PORT.",
     set_text<&LaunchConfig::rdzv_endpoint>},
    {Flag::kRdzvId, "", "--rdzv-id", kValue, kEnv, kTorch, "ID", "none",
     "Job id, the same on every node of the job.", set_text<&LaunchConfig::rdzv_id>},
    {Flag::kRdzvConf, "", "--rdzv-conf", kValue, kEnv, kTorch, "K=V,...", "",
     "More rendezvous settings, e.g. timeout=900,join_timeout=600.",
     [](LaunchConfig& c, const Raw& r) { c.rdzv_conf = parse_rdzv_conf(r.origin, r.text); }},
    {Flag::kStandalone, "", "--standalone", kSwitch, kEnv, kTorch, "", "",
     "Single node: host the rendezvous on a free local port (c10d, localhost:0, a random id); "
     "any --rdzv-backend, --rdzv-endpoint or --rdzv-id is ignored.",
     set_switch<&LaunchConfig::standalone>},
    {Flag::kMaxRestarts, "", "--max-restarts", kValue, kEnv, kTorch, "N", "0",
     "Restarts of the worker group before the job fails.", set_count<&LaunchConfig::max_restarts>},
    {Flag::kMonitorInterval, "", "--monitor-interval", kValue, kEnv, kTorch, "SECONDS", "0.1",
     "How often the state of the workers is checked.",
     [](LaunchConfig& c, const Raw& r) { c.monitor_interval = parse_seconds(r); }},
    {Flag::kStartMethod, "", "--start-method", kValue, kEnv, kTorch, "{spawn,fork,forkserver}",
     "spawn", "Accepted for compatibility: elasticrun always starts workers with fork and exec.",
     [](LaunchConfig& c, const Raw& r) {
       check_choice(r, {"spawn", "fork", "forkserver"});
       c.start_method = r.text;
     }},
    {Flag::kEventLogHandler, "", "--event-log-handler", kValue, kEnv, kTorch, "NAME", "null",
     "console: every event of the agent as a JSON line on stderr (--event-log writes them to a "
     "file); null, dynamic_rendezvous: none, as under torchrun.",
     [](LaunchConfig& c, const Raw& r) {
       check_choice(r, {"null", "console", "dynamic_rendezvous"});
       c.event_log_handler = r.text;
     }},
    {Flag::kRole, "", "--role", kValue, kEnv, kTorch, "ROLE", "default",
     "Role of the workers: ROLE_NAME in their environment and the console line prefix.",
     set_text<&LaunchConfig::role>},
    {Flag::kModule, "-m", "--module", kSwitch, kEnv, kTorch, "", "",
     "Run TRAINING_SCRIPT as a Python module, like python -m.", set_switch<&LaunchConfig::module>},
    {Flag::kNoPython, "", "--no-python", kSwitch, kEnv, kTorch, "", "",
     "Run TRAINING_SCRIPT itself instead of through python (e.g. a C++ worker).",
     set_switch<&LaunchConfig::no_python>},
    {Flag::kRunPath, "", "--run-path", kSwitch, kEnv, kTorch, "", "",
     "Run the script with Python's runpy.run_path (give an absolute path); takes precedence "
     "over --no-python and --module.",
     set_switch<&LaunchConfig::run_path>},
    {Flag::kLogDir, "", "--log-dir", kValue, kEnv, kTorch, "DIR", "",
     "Base directory for log files; each run writes <rdzv-id>_<random>/attempt_<n>/<local "
     "rank>/ beneath it.",
     set_text<&LaunchConfig::log_dir>},
    {Flag::kRedirects, "-r", "--redirects", kValue, kEnv, kTorch, "SPEC", "0",
     "Send worker streams to log files instead of the console: 0 none, 1 stdout, 2 stderr, 3 "
     "both, or per local rank like 0:3,1:2 (ranks not named: 0).",
     set_streams<&LaunchConfig::redirects>},
    {Flag::kTee, "-t", "--tee", kValue, kEnv, kTorch, "SPEC", "0",
     "Like --redirects, but the streams reach the console too.", set_streams<&LaunchConfig::tee>},
    {Flag::kLogLinePrefixTemplate, "", "--log-line-prefix-template", kValue, kEnv, kTorch,
     "TEMPLATE", "",
     "Prefix of tee'd console lines; ${role_name}, ${local_rank}, ${rank} and ${hostname} are "
     "replaced. Default: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else [${role_name}${local_rank}]:",
     // torchrun: `args.log_line_prefix_template or $TORCHELASTIC_...`: empty means unset.
     [](LaunchConfig& c, const Raw& r) {
       if (!r.text.empty()) c.log_line_prefix_template = r.text;
     }},
    {Flag::kLocalRanksFilter, "", "--local-ranks-filter", kValue, kEnv, kTorch, "RANKS", "",
     "Only these local ranks (e.g. 0,1) reach the console; log files keep every rank.",
     [](LaunchConfig& c, const Raw& r) {
       c.local_ranks_filter = parse_local_ranks(r.origin, r.text);
     }},
    {Flag::kDuplicateStdoutFilters, "", "--duplicate-stdout-filters", kValue, kEnv, kTorch,
     "FILTERS", "",
     "Also copy stdout lines that contain any of these comma-separated strings to a separate "
     "file (,, is a literal comma).",
     set_list<&LaunchConfig::duplicate_stdout_filters>},
    {Flag::kDuplicateStderrFilters, "", "--duplicate-stderr-filters", kValue, kEnv, kTorch,
     "FILTERS", "", "The same for stderr.", set_list<&LaunchConfig::duplicate_stderr_filters>},
    {Flag::kNodeRank, "", "--node-rank", kValue, kEnv, kTorch, "N", "0",
     "Rank of this node; static rendezvous only.", set_count<&LaunchConfig::node_rank>},
    {Flag::kMasterAddr, "", "--master-addr", kValue, kEnv, kTorch, "ADDR", "127.0.0.1",
     "Address of node 0 (IPv6 as [::1]); static rendezvous only.",
     set_text<&LaunchConfig::master_addr>},
    {Flag::kMasterPort, "", "--master-port", kValue, kEnv, kTorch, "PORT", "29500",
     "Port on node 0; static rendezvous only. Without it a single-node static job runs c10d on "
     "a free port instead, as torchrun does.",
     set_port<&LaunchConfig::master_port>},
    {Flag::kLocalAddr, "", "--local-addr", kValue, kEnv, kTorch, "ADDR", "",
     "This node's address as the others reach it; default: its FQDN.",
     set_text<&LaunchConfig::local_addr>},
    {Flag::kLogsSpecs, "", "--logs-specs", kValue, kNoEnv, kTorch, "NAME", "",
     "Accepted for compatibility: torchrun's LogsSpecs plugins are Python entry points; "
     "elasticrun keeps torchrun's default log layout.",
     set_text<&LaunchConfig::logs_specs>},
    {Flag::kNumaBinding, "", "--numa-binding", kValue, kNoEnv, kTorch,
     "{node,socket,exclusive,core-complex}", "",
     "Bind each worker to the CPUs near its GPU (local rank i: CUDA device i), as torchrun "
     "does; see docs/numa-binding.md.",
     [](LaunchConfig& c, const Raw& r) {
       check_choice(r, {"node", "socket", "exclusive", "core-complex"});
       c.numa_binding = r.text;
     }},
    {Flag::kSignalsToHandle, "", "--signals-to-handle", kValue, kEnv, kTorch, "SIGNALS",
     "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
     "Signals passed on to the workers (an elastic job's node leaves gracefully on the first); "
     "an srun step adds SIGUSR1,SIGUSR2.",
     [](LaunchConfig& c, const Raw& r) {
       c.signals_to_handle = parse_signal_list(r.origin, r.text);
     }},
    {Flag::kShutdownTimeout, "", "--shutdown-timeout", kValue, kEnv, kTorch, "SECONDS", "",
     "Grace period between the shutdown signal and SIGKILL. Default: "
     "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30.",
     set_count<&LaunchConfig::shutdown_timeout>},
    {Flag::kVirtualLocalRank, "", "--virtual-local-rank", kSwitch, kEnv, kTorch, "", "",
     "Every worker sees LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to its own GPU.",
     set_switch<&LaunchConfig::virtual_local_rank>},
    {Flag::kPrintCompletion, "", "--print-completion", kValue, kNoEnv, kTorch, "{bash,zsh,tcsh}",
     "", "Print a shell completion script for elasticrun and exit."},
    {Flag::kShutdownSignal, "", "--shutdown-signal", kValue, kEnv, kHyper, "SIGNAL", "SIGTERM",
     "Signal that asks the workers to stop; SIGKILL follows after --shutdown-timeout.",
     [](LaunchConfig& c, const Raw& r) { c.shutdown_signal = parse_signal(r.origin, r.text); }},
    {Flag::kPreTrainScript, "", "--pre-train-script", kValue, kEnv, kHyper, "PATH", "",
     "Program run before the workers, at every start and restart.",
     set_text<&LaunchConfig::pre_train_script>},
    {Flag::kPreTrainArgs, "", "--pre-train-args", kValue, kEnv, kHyper, "ARGS", "",
     "Arguments of --pre-train-script: one string, split into words like a shell does.",
     set_words<&LaunchConfig::pre_train_args>},
    {Flag::kPostTrainScript, "", "--post-train-script", kValue, kEnv, kHyper, "PATH", "",
     "Program run after the workers end, at every start and restart.",
     set_text<&LaunchConfig::post_train_script>},
    {Flag::kPostTrainArgs, "", "--post-train-args", kValue, kEnv, kHyper, "ARGS", "",
     "Arguments of --post-train-script, like --pre-train-args.",
     set_words<&LaunchConfig::post_train_args>},
    {Flag::kServerHost, "", "--server-host", kValue, kEnv, kHyper, "HOST", "127.0.0.1",
     "Where --server-port (or --metrics-port) serves: loopback unless given (hyperpodrun binds "
     "0.0.0.0; the API has no authentication yet).",
     set_text<&LaunchConfig::server_host>},
    {Flag::kServerPort, "", "--server-port", kValue, kEnv, kHyper, "PORT", "",
     "Serve the Prometheus metrics and the HTTP control API (docs/api.md) on this port; 0: a "
     "free one (the agent logs which). Not given: no server.",
     set_port<&LaunchConfig::server_port>},
    {Flag::kInprocessRestart, "", "--inprocess-restart", kSwitch, kEnv, kHyper, "", "",
     "Accepted; in-process restart is not implemented yet, failed workers restart as processes.",
     set_switch<&LaunchConfig::inprocess_restart>},
    {Flag::kMinReplicas, "", "--min-replicas", kValue, kNoEnv, kElastic, "N", "MIN of --nnodes",
     "Fewest nodes the job runs with. Overrides --config; an explicit --nnodes must agree."},
    {Flag::kMaxReplicas, "", "--max-replicas", kValue, kNoEnv, kElastic, "N",
     "MAX of --nnodes, else --min-replicas",
     "Most nodes the job grows to. Overrides --config; an explicit --nnodes must agree."},
    {Flag::kReplicaIncrementStep, "", "--replica-increment-step", kValue, kNoEnv, kElastic, "K",
     "1", "Allowed sizes are MIN, MIN+K, MIN+2K, ... up to MAX."},
    {Flag::kReplicaDiscreteValues, "", "--replica-discrete-values", kValue, kNoEnv, kElastic,
     "SIZES", "",
     "Allowed sizes exactly, e.g. 2,4,8, each within MIN..MAX; instead of "
     "--replica-increment-step."},
    {Flag::kGracefulShutdownTimeout, "", "--graceful-shutdown-timeout", kValue, kNoEnv, kElastic,
     "SECONDS", "60",
     "After a scale event, time the workers get to save a checkpoint and exit before they are "
     "killed."},
    {Flag::kScalingTimeout, "", "--scaling-timeout", kValue, kNoEnv, kElastic, "SECONDS", "10",
     "How long extra nodes must have been waiting before the job grows onto them."},
    {Flag::kFaultyScaleDownTimeout, "", "--faulty-scale-down-timeout", kValue, kNoEnv, kElastic,
     "SECONDS", "30",
     "After a node fails, how long to wait for a replacement before the job shrinks without it."},
    {Flag::kMinStablePeriod, "", "--min-stable-period", kValue, kNoEnv, kElastic, "SECONDS", "30",
     "Least time between two voluntary scale events (growing, operator requests); it doubles "
     "while events keep coming, up to --max-stable-period."},
    {Flag::kMaxStablePeriod, "", "--max-stable-period", kValue, kNoEnv, kElastic, "SECONDS", "600",
     "The most the stable period grows to."},
    {Flag::kConfig, "", "--config", kValue, kNoEnv, kElastic, "FILE", "",
     "Job config (YAML): elasticPolicy with hyperpodrun's keys, and worldSizeOverrides "
     "(docs/job-config.md). Flags override it; unknown keys are errors."},
    {Flag::kWarmStart, "", "--warm-start", kSwitch, kNoEnv, kElastic, "", "",
     "Python workers: keep one interpreter per local rank started ahead, with "
     "--warm-start-imports already imported, and run each start's and restart's script in it "
     "(unchanged: as __main__, with its argv, environment and streams), so a restart skips "
     "the interpreter's start and `import torch` (docs/warm-start.md).",
     set_switch<&LaunchConfig::warm_start>},
    {Flag::kEventLog, "", "--event-log", kValue, kNoEnv, kElastic, "FILE", "",
     "Append every decision and event of this agent to FILE, one JSON object a line "
     "(docs/events.md); the leader's is the job's history.",
     set_text<&LaunchConfig::event_log>},
    {Flag::kMetricsPort, "", "--metrics-port", kValue, kNoEnv, kElastic, "PORT", "",
     "Serve Prometheus metrics on http://--server-host:PORT/metrics (docs/metrics.md), with the "
     "HTTP control API; 0: a free port (the agent logs which).",
     [](LaunchConfig& c, const Raw& r) { c.metrics_port = parse_port(r); }},
    {Flag::kSpotNoticeUrl, "", "--spot-notice-url", kValue, kNoEnv, kElastic, "URL", "",
     "Poll this instance-metadata URL for an interruption notice (AWS: "
     "http://169.254.169.254/latest/meta-data/spot/instance-action, with IMDSv2's token) and "
     "leave the job gracefully on one, as on SIGTERM; off unless given (docs/deploy.md).",
     [](LaunchConfig& c, const Raw& r) {
       if (!r.text.starts_with("http://")) fail_flag(r, "not an http:// URL");
       c.spot_notice_url = r.text;
     }},
    {Flag::kSpotNoticeInterval, "", "--spot-notice-interval", kValue, kNoEnv, kElastic, "SECONDS",
     "5", "How often --spot-notice-url is asked.",
     [](LaunchConfig& c, const Raw& r) {
       c.spot_notice_interval = parse_seconds(r);
       if (c.spot_notice_interval < 0.05) fail_flag(r, "below 0.05 s");
     }},
    {Flag::kHostDiscoveryScript, "", "--host-discovery-script", kValue, kNoEnv, kElastic, "PATH",
     "",
     "A program that prints the hosts the job may use now, one host[:slots] a line "
     "(horovodrun's contract); asked by the agent that closes or leads a round, every "
     "--host-discovery-interval. Only agents on listed hosts are admitted; a member whose host "
     "leaves the list stops at an agreed step. Each host runs its own agent (docs/deploy.md).",
     [](LaunchConfig& c, const Raw& r) {
       if (r.text.empty()) fail_flag(r, "empty");
       c.host_discovery_script = r.text;
     }},
    {Flag::kHostDiscoveryInterval, "", "--host-discovery-interval", kValue, kNoEnv, kElastic,
     "SECONDS", "1", "How often --host-discovery-script may run.",
     [](LaunchConfig& c, const Raw& r) {
       c.host_discovery_interval = parse_seconds(r);
       if (c.host_discovery_interval < 0.05) fail_flag(r, "below 0.05 s");
     }},
    {Flag::kMemoryTierLimit, "", "--memory-tier-limit", kValue, kNoEnv, kElastic, "BYTES|auto",
     "auto",
     "The most the node's memory tier may hold: the snapshots of the training state that the "
     "SDK's saves put in shared memory this agent owns, from which restarted workers and "
     "replacement nodes restore (docs/memory-tier.md). A number with an optional K, M, G or T "
     "(powers of 1024); auto: what /dev/shm has free; 0: no memory tier.",
     [](LaunchConfig& c, const Raw& r) { c.memory_tier_limit = parse_bytes(r); }},
    {Flag::kMemoryReplicas, "", "--memory-replicas", kValue, kNoEnv, kElastic, "N", "1",
     "How many other nodes' memory tiers hold a copy of each node's sharded training state "
     "(FSDP, DTensor), replicated while training runs, so that the job survives the loss of "
     "that many nodes at once without a checkpoint directory (docs/memory-tier.md). 0: none.",
     [](LaunchConfig& c, const Raw& r) { c.memory_replicas = parse_count(r); }},
    {Flag::kMemoryReplicationRate, "", "--memory-replication-rate", kValue, kNoEnv, kElastic,
     "BYTES", "1G",
     "The most bytes a second this node's agent takes from its peers when it replicates their "
     "state, so that replication never starves the training's own traffic. A number with an "
     "optional K, M, G or T (powers of 1024); 0: no cap.",
     [](LaunchConfig& c, const Raw& r) {
       const auto rate = parse_bytes(r);
       if (!rate) fail_flag(r, "a number of bytes a second, not auto");
       c.memory_replication_rate = *rate;
     }},
    {Flag::kDataCacheLimit, "", "--data-cache-limit", kValue, kNoEnv, kElastic, "BYTES|auto",
     "auto",
     "The most the node's dataset cache may hold: what workers decoded once (dataset shards, "
     "as arrays) and put in shared memory this agent owns through the SDK's "
     "elasticrun.data.cached(), which a restarted or re-formed worker maps instead of reading "
     "and decoding again (docs/memory-tier.md). A number with an optional K, M, G or T (powers "
     "of 1024); auto: what /dev/shm has free; 0: no cache.",
     [](LaunchConfig& c, const Raw& r) { c.data_cache_limit = parse_bytes(r); }},
    {Flag::kWarmStartImports, "", "--warm-start-imports", kValue, kNoEnv, kElastic, "MODULES",
     "torch,torch._dynamo",
     "Modules the warm interpreters import ahead, comma-separated (DDP, FSDP and torch.compile "
     "import torch._dynamo on first use).",
     [](LaunchConfig& c, const Raw& r) {
       c.warm_start_imports = parse_comma_list(r.text);
       for (const auto& m : c.warm_start_imports) {
         if (!valid_module_name(m)) {
           fail_flag(r, util::quote(m) + " is not a Python module name");
         }
       }
     }},
    {Flag::kHangTimeout, "", "--hang-timeout", kValue, kNoEnv, kHealth, "SECONDS|auto|off", "auto",
     "Workers that use the SDK: no step for this long after their first is a hang (their "
     "stacks are recorded, then the job restarts as after a failure). auto: 10 x the slowest of "
     "the job's recent steps, at least 30 minutes; a section marked with elasticrun.section() "
     "is no hang (docs/health.md).",
     [](LaunchConfig& c, const Raw& r) {
       auto& h = c.health;
       if (r.text == "auto") {
         h.hang = HealthOptions::Hang::kAuto;
       } else if (r.text == "off") {
         h.hang = HealthOptions::Hang::kOff;
       } else {
         h.hang = HealthOptions::Hang::kFixed;
         h.hang_seconds = parse_seconds(r);
         if (h.hang_seconds <= 0) fail_flag(r, "a hang limit must be above 0 (or off)");
       }
     },
     "monitors.hangTimeoutInSeconds"},
    {Flag::kStartupTimeout, "", "--startup-timeout", kValue, kNoEnv, kHealth, "SECONDS", "0",
     "Workers that use the SDK: no first step within this long of their start is a fault; 0: "
     "no limit.",
     [](LaunchConfig& c, const Raw& r) { c.health.startup_timeout = parse_seconds(r); },
     "monitors.startupTimeoutInSeconds"},
    {Flag::kNonFiniteLoss, "", "--non-finite-loss", kValue, kNoEnv, kHealth, "{on,off}", "on",
     "A NaN or infinite loss reported through elasticrun.step(loss=...) is a fault.",
     // "true"/"false" too: the job config's YAML booleans.
     [](LaunchConfig& c, const Raw& r) {
       check_choice(r, {"on", "off", "true", "false"});
       c.health.non_finite_loss = r.text == "on" || r.text == "true";
     },
     "monitors.nonFiniteLoss"},
    {Flag::kExcludeAfter, "", "--exclude-after", kValue, kNoEnv, kHealth, "N", "3",
     "Elastic jobs: a node whose workers fail or fault N times within --exclude-window is "
     "excluded for --exclude-cooldown (a spare replaces it, else the job shrinks); 0: never.",
     [](LaunchConfig& c, const Raw& r) { c.health.exclude_after = parse_count(r); },
     "monitors.excludeAfterFaults"},
    {Flag::kExcludeWindow, "", "--exclude-window", kValue, kNoEnv, kHealth, "SECONDS", "600",
     "The window in which a node's faults count towards its exclusion.",
     [](LaunchConfig& c, const Raw& r) { c.health.exclude_window = parse_seconds(r); },
     "monitors.excludeWindowInSeconds"},
    {Flag::kExcludeCooldown, "", "--exclude-cooldown", kValue, kNoEnv, kHealth, "SECONDS", "300",
     "How long an excluded node stays out, twice as long on each repeat (elasticctl readmit "
     "lets it back at once).",
     [](LaunchConfig& c, const Raw& r) { c.health.exclude_cooldown = parse_seconds(r); },
     "monitors.excludeCooldownInSeconds"},
    {Flag::kStragglerFactor, "", "--straggler-factor", kValue, kNoEnv, kHealth, "F", "0",
     "Elastic jobs: a node whose compute time (elasticrun.compute()) stays above F times the "
     "other nodes' median for --straggler-points samples in a row is excluded; 0: off.",
     [](LaunchConfig& c, const Raw& r) {
       c.health.straggler_factor = parse_double(r.origin, r.text);
       if (c.health.straggler_factor != 0 && c.health.straggler_factor <= 1) {
         fail_flag(r, "a factor above 1 (or 0: off)");
       }
     },
     "monitors.stragglerFactor"},
    {Flag::kStragglerPoints, "", "--straggler-points", kValue, kNoEnv, kHealth, "N", "10",
     "How many samples in a row (one per heartbeat) make a straggler.",
     [](LaunchConfig& c, const Raw& r) {
       c.health.straggler_points = parse_int(r.origin, r.text);
       if (c.health.straggler_points < 1) fail_flag(r, "at least 1");
     },
     "monitors.stragglerDataPoints"},
    {Flag::kGpuHealth, "", "--gpu-health", kValue, kNoEnv, kHealth, "{auto,off}", "auto",
     "The NVIDIA driver's error reports of the workers' GPUs, read through NVML every 5 s: a "
     "hardware XID (48, 64, 74, 79, 94, 95, 119, 120, 140), a rise of the uncorrectable ECC "
     "error count, or a failed row remapping is a fault of the node (the job restarts as after a "
     "failure); pending page retirements and row remaps are logged. auto: on where NVML and a "
     "GPU exist, else skipped with a note (docs/health.md).",
     // true and false: the job config's YAML booleans, as --non-finite-loss takes them.
     [](LaunchConfig& c, const Raw& r) {
       check_choice(r, {"auto", "off", "true", "false"});
       c.health.gpu = r.text == "auto" || r.text == "true" ? HealthOptions::Gpu::kAuto
                                                           : HealthOptions::Gpu::kOff;
     },
     "monitors.gpuHealth"},
};

constexpr size_t kWidth = 100;
const std::string kNoBreak = "\x01";
constexpr size_t kHelpColumn = 34;

// Appends `text` word-wrapped to kWidth, every line after the first indented by `indent`.
void wrap(std::string& out, std::string_view text, size_t column, size_t indent) {
  while (!text.empty()) {
    const auto end = text.find(' ');
    const auto word = text.substr(0, end);
    if (column > indent && column + 1 + word.size() > kWidth) {
      out += '\n' + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    for (char c : word) out += c == kNoBreak[0] ? ' ' : c;
    column += word.size();
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
  }
}

void append_group(std::string& out, Group group, std::string_view title) {
  out += '\n';
  out += title;
  out += ":\n";
  for (const auto& f : kFlags) {
    if (f.group != group) continue;
    std::string left = "  ";
    if (!f.short_name.empty()) left += std::string(f.short_name) + ", ";
    left += f.long_name;
    if (f.takes_value) left += " " + std::string(f.metavar);
    out += left;
    size_t column = left.size();
    if (column + 2 > kHelpColumn) {
      out += '\n';
      column = 0;
    }
    out += std::string(kHelpColumn - column, ' ');
    std::string help(f.help);
    // kNoBreak keeps "[default: X]" on one line.
    if (!f.default_text.empty()) {
      std::string value(f.default_text);
      for (size_t at = 0; (at = value.find(' ', at)) != std::string::npos;)
        value.replace(at, 1, kNoBreak);
      help += " [default:" + kNoBreak + value + "]";
    }
    wrap(out, help, kHelpColumn, kHelpColumn);
    out += '\n';
  }
}

std::vector<std::string> all_long_spellings() {
  std::vector<std::string> names;
  for (const auto& f : kFlags) {
    for (auto& s : f.spellings()) {
      if (s.starts_with("--")) names.push_back(std::move(s));
    }
  }
  return names;
}

}  // namespace

std::string FlagSpec::upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string FlagSpec::dest() const {
  std::string d(long_name.substr(2));
  for (auto& c : d) {
    if (c == '-') c = '_';
  }
  return d;
}

std::vector<std::string> FlagSpec::spellings() const {
  std::vector<std::string> out{std::string(long_name)};
  const std::string underscore = "--" + dest();
  if (underscore != long_name) out.push_back(underscore);
  if (!short_name.empty()) out.emplace_back(short_name);
  return out;
}

const std::vector<FlagSpec>& flag_table() {
  return kFlags;
}

const FlagSpec& flag_spec(Flag id) {
  const auto& spec = kFlags[static_cast<size_t>(id)];
  assert(spec.id == id);  // kFlags is in enum order
  return spec;
}

std::string help_text() {
  std::string out = "usage: elasticrun [options] TRAINING_SCRIPT [SCRIPT_ARGS ...]\n\n";
  wrap(out,
       "Starts --nproc-per-node workers running TRAINING_SCRIPT on this node and supervises "
       "them: a drop-in replacement for torchrun. Everything after TRAINING_SCRIPT is passed to "
       "it untouched, flags included.",
       0, 0);
  out += "\n\n";
  wrap(out,
       "Python workers run with PYTHON_EXEC when it is set; else with the python of the venv or "
       "conda environment elasticrun is installed in (as torchrun runs its own); else with the "
       "python3 (then python) found on PATH.",
       0, 0);
  out += "\n\n";
  wrap(out,
       "Under srun, SLURM's job id, task count and node list give the rendezvous (every task one "
       "node); in a Kubernetes Indexed Job, the pod's JOB_COMPLETION_INDEX and DNS name do. "
       "Flags and PET_ variables win; what was read is logged (docs/deploy.md).",
       0, 0);
  out += "\n\n";
  std::string_view intro =
      "Flags take --flag VALUE or --flag=VALUE, and both spellings (--nproc-per-node, "
      "--nproc_per_node). A flag that is not given is read from PET_<NAME> in the environment "
      "(e.g. PET_NPROC_PER_NODE=8), except the elastic flags and";
  std::string no_env;
  for (const auto& f : kFlags) {
    if (!f.env_fallback && f.id != Flag::kHelp && f.group != Group::kElastic)
      no_env += " " + std::string(f.long_name) + ",";
  }
  no_env.back() = '.';
  std::string paragraph = std::string(intro) + no_env;
  wrap(out, paragraph, 0, 0);
  out += '\n';
  append_group(out, Group::kTorchrun, "torchrun-compatible");
  append_group(out, Group::kHyperPod, "HyperPod-compatible (hyperpodrun)");
  append_group(out, Group::kElastic, "elastic");
  append_group(out, Group::kHealth, "health monitors");
  return out;
}

std::string completion_script(std::string_view shell) {
  std::string words;
  for (const auto& name : all_long_spellings()) words += (words.empty() ? "" : " ") + name;
  if (shell == "bash") {
    return "# bash completion for elasticrun\n"
           "_elasticrun() {\n"
           "  local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
           "  if [[ \"$cur\" == -* ]]; then\n"
           "    COMPREPLY=($(compgen -W \"-h -m -r -t " +
           words +
           "\" -- \"$cur\"))\n"
           "  else\n"
           "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
           "  fi\n"
           "}\n"
           "complete -o filenames -F _elasticrun elasticrun\n";
  }
  if (shell == "zsh") {
    std::string out = "#compdef elasticrun\n_arguments -S \\\n";
    for (const auto& f : kFlags) {
      for (const auto& s : f.spellings()) {
        out += "  '" + s + (f.takes_value ? "=" : "") + "[" + std::string(f.long_name) + "]" +
               (f.takes_value ? ":value:" : "") + "' \\\n";
      }
    }
    return out + "  '1:training script:_files' \\\n  '*::script arguments:_normal'\n";
  }
  if (shell == "tcsh") {
    std::string names;
    for (const auto& name : all_long_spellings())
      names += (names.empty() ? "" : " ") + name.substr(2);
    return "complete elasticrun 'c/--/(" + names + ")/' 'p/*/f/'\n";
  }
  throw ConfigError("--print-completion " + util::quote(shell) +
                    ": expected one of bash, zsh, tcsh");
}

}  // namespace elasticrun::cli
