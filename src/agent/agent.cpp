#include "agent/agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "agent/attempt.hpp"
#include "agent/dynamic_agent.hpp"
#include "agent/fixed_agent.hpp"
#include "agent/job_control.hpp"
#include "agent/pid1_signals.hpp"
#include "agent/worker_env.hpp"
#include "control/assignment.hpp"
#include "control/control_block.hpp"
#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "memory/data_cache.hpp"
#include "memory/tier.hpp"
#include "serve/http_server.hpp"
#include "supervisor/cgroup.hpp"
#include "supervisor/death_watch.hpp"
#include "supervisor/spawn.hpp"
#include "util/host_name.hpp"
#include "util/logging.hpp"
#include "util/unique_dir.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;
using supervisor::WorkerExit;

// torchrun's layout: <log_dir or a fresh temp dir>/<run_id>_<random>/attempt_<n>/<local_rank>/
fs::path make_run_dir(const AgentConfig& c) {
  fs::path base;
  if (!c.log_dir.empty()) {
    base = c.log_dir;
    fs::create_directories(base);
  } else {
    // Python's mkdtemp(prefix="torchelastic_").
    base = util::make_unique_dir(fs::temp_directory_path(), "torchelastic_");
  }
  return util::make_unique_dir(base, c.run_id + "_", /*owner_only=*/false);
}

// The control block lives in tmpfs when there is one: workers map it.
std::string control_path(const fs::path& run_dir) {
  const std::string name =
      "elasticrun-" + std::to_string(::getpid()) + "-" + util::random_suffix() + ".ctl";
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm/" + name;
  return (run_dir / name).string();
}

// What the event log says of this agent as it starts.
// "15,2,1,3": signal numbers, as ELASTICRUN_LEAVE_SIGNALS carries them.
std::string signal_list(const std::vector<int>& signals) {
  std::string out;
  for (int s : signals) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

nlohmann::json agent_start_fields(const AgentConfig& c) {
  return {{"run_id", c.dynamic ? c.rdzv.run_id : c.run_id},
          {"backend", c.dynamic      ? (c.rdzv.etcd ? "etcd" : "c10d")
                      : c.standalone ? "standalone"
                                     : "static"},
          {"min_nodes", c.dynamic ? c.rdzv.sizes.min_replicas : c.nnodes},
          {"max_nodes", c.dynamic ? c.rdzv.sizes.max_replicas : c.nnodes},
          {"nproc_per_node", c.nproc_per_node},
          {"pid", static_cast<int>(::getpid())}};
}

// Opened before anything starts: a log that cannot be written is bad input.
std::unique_ptr<events::EventLog> open_event_log(const AgentConfig& c,
                                                 std::vector<events::EventObserver*> observers) {
  if (c.event_log.path.empty() && !c.event_log.console && observers.empty()) return nullptr;
  try {
    return std::make_unique<events::EventLog>(c.event_log, std::move(observers));
  } catch (const Error& e) {
    throw ConfigError(std::string("--event-log: ") + e.what());
  }
}

// What --server-port / --metrics-port serve, made before anything starts:
// a port that cannot be bound is bad input too.
struct Serving {
  std::unique_ptr<serve::AgentMetrics> metrics;
  std::unique_ptr<AgentJobControl> control;
  std::unique_ptr<serve::HttpServer> server;  // destroyed first: it calls the two above
  std::vector<events::EventObserver*> observers() const {
    if (!metrics) return {};
    return {metrics.get(), control.get()};
  }
};

int run_node(const AgentConfig& config, events::EventLog& events, Serving& serving) {
  auto log = util::logger("agent");
  for (const auto& note : config.notes) log->info("{}", note);
  // First of all: a node that cannot bind its workers fails on its own, at
  // once, having started nothing and joined no rendezvous (torchrun fails
  // later, as it starts the workers). CUDA_VISIBLE_DEVICES is the agent's,
  // which the workers inherit.
  std::vector<std::vector<int>> cpu_sets;
  if (config.numa_binding) {
    cpu_sets = numa_cpu_sets(*config.numa_binding, config.nproc_per_node, config.numa_root,
                             current_environment());
  }
  // A worker's pipe closing must be an error code, not our death.
  ::signal(SIGPIPE, SIG_IGN);
  end_on_signals_as_pid1(config.signals_to_handle);
  util::Status st = supervisor::become_subreaper();
  if (!st) log->warn("{}; orphaned grandchildren will not be reaped by the agent", st.message());
  // Where the machine lets us, each attempt's workers run in a cgroup below
  // the job's (supervisor/cgroup.hpp): nothing they start, setsid or not,
  // outlives the attempt, nor a killed agent, whose death watch kills it.
  supervisor::Cgroup job_cgroup;
  if (auto cg = supervisor::Cgroup::create_job(); cg.is_ok()) {
    job_cgroup = std::move(cg).value();
  } else {
    log->info(
        "{}: workers run without a cgroup, and what they leave behind is found as our orphans",
        cg.status().message());
  }
  // The memory tier: snapshots the workers save, held here so that they
  // outlive the workers (docs/memory-tier.md). Removed when the agent ends,
  // by the death watch when it is killed.
  std::unique_ptr<memory::Tier> tier;
  // The agent's replicator prunes the shards then (agent/memory_replicator.hpp):
  // a rank's older shards must outlive its newer ones until those are
  // replicated, in the workers' hands and in the tier's adoption alike.
  const bool replicated = config.dynamic && config.memory_replicas > 0;
  if (config.memory_tier) {
    try {
      tier = memory::Tier::create(
          memory::Tier::default_base(fs::temp_directory_path()), config.memory_tier_limit,
          replicated ? memory::ShardPruning::kReplicator : memory::ShardPruning::kSdk);
      log->debug("memory tier in {}, at most {} bytes", tier->path().string(), tier->limit());
    } catch (const Error& e) {
      log->warn("{}; workers save no snapshot to memory", e.what());
    }
  }
  // The dataset cache: what workers decoded once, mapped again by those
  // that restart or re-form here (docs/memory-tier.md, "Dataset cache").
  std::unique_ptr<memory::DataCache> data_cache;
  if (config.data_cache) {
    try {
      data_cache = memory::DataCache::create(memory::Tier::default_base(fs::temp_directory_path()),
                                             config.data_cache_limit);
    } catch (const Error& e) {
      log->warn("{}; workers cache no dataset in memory", e.what());
    }
  }
  const fs::path run_dir = make_run_dir(config);
  // The control block: scale events for the workers of a dynamic job, the
  // progress the health monitors read in every job. Made before the death
  // watch, which removes its file (in /dev/shm) with the tier when the
  // agent is killed.
  auto cb = control::ControlBlock::create(control_path(run_dir), config.nproc_per_node);
  std::vector<std::string> doomed;
  if (tier) doomed.push_back(tier->path().string());
  if (data_cache) doomed.push_back(data_cache->path().string());
  if (cb) {
    doomed.push_back(cb.value().path());
    doomed.push_back(control::assignment_path(cb.value().path()));  // --inprocess-restart's
  }
  remove_as_pid1_ends(doomed);
  supervisor::DeathWatch watch;
  st = watch.start(&job_cgroup, doomed);
  if (!st) log->warn("{}; workers' descendants may outlive a killed agent", st.message());

  NodeContext node;
  node.events = &events;
  node.metrics = serving.metrics.get();
  node.watch = &watch;
  node.job_cgroup = &job_cgroup;
  node.run_dir = run_dir;
  node.host = util::host_name();
  node.base = current_environment();
  for (const auto& [name, value] : config.worker_env) node.base[name] = value;
  node.cpu_sets = std::move(cpu_sets);
  // The GPUs the workers see, read through NVML for the agent's life.
  const std::unique_ptr<GpuWatch> gpu = start_gpu_watch(config.gpu_health, node.base);
  node.gpu = gpu.get();
  if (config.nproc_per_node > 1 && !node.base.count("OMP_NUM_THREADS")) {
    log->warn(
        "setting OMP_NUM_THREADS=1 for each worker to avoid overloading the system; "
        "tune it for your application");
    node.base["OMP_NUM_THREADS"] = "1";
  }
  // Interpreters import while the rendezvous runs; the pool outlives every
  // attempt and kills what is idle when the agent is done.
  std::unique_ptr<WarmPool> warm;
  if (config.warm_start.enabled) {
    warm = std::make_unique<WarmPool>(config.warm_start, node.base, config.nproc_per_node,
                                      node.cpu_sets);
    warm->refill();
    node.warm = warm.get();
  }
  std::unique_ptr<control::ControlBlock> control;
  if (cb) {
    control = std::make_unique<control::ControlBlock>(std::move(cb).value());
    if (!config.dynamic) control->set_agent_flags(control::kAgentFixed);
    if (config.inprocess_restart) control->set_agent_flags(control::kAgentInprocess);
    node.base["ELASTICRUN_CONTROL_FILE"] = control->path();
    // The signals this agent turns into a graceful leave: a worker that
    // receives one too (SLURM signals every process of a step) waits for
    // the agreed stop instead of dying (python/elasticrun, attach()).
    if (config.dynamic)
      node.base["ELASTICRUN_LEAVE_SIGNALS"] = signal_list(config.signals_to_handle);
    node.control = control.get();
    if (serving.control) serving.control->set_block(control.get());
  } else {
    log->warn("{}; workers will not see scale events in advance, and their progress is not watched",
              cb.status().message());
  }
  if (tier) {
    node.base["ELASTICRUN_MEMORY_DIR"] = tier->path().string();
    node.base["ELASTICRUN_MEMORY_LIMIT"] = std::to_string(tier->limit());
    if (replicated) {
      node.base["ELASTICRUN_MEMORY_REPLICAS"] = std::to_string(config.memory_replicas);
    }
    node.memory = tier.get();
  }
  if (data_cache) {
    node.base["ELASTICRUN_DATA_CACHE_DIR"] = data_cache->path().string();
    node.base["ELASTICRUN_DATA_CACHE_LIMIT"] = std::to_string(data_cache->limit());
  }
  // Removed however the run ends; the workers that still map it keep their mapping.
  struct Unlink {
    control::ControlBlock* block;
    ~Unlink() {
      if (block) (void)block->unlink();
    }
  } unlink{control.get()};
  // The API stops reading the block before it goes.
  struct Unshare {
    AgentJobControl* api;
    ~Unshare() {
      if (api) api->set_block(nullptr);
    }
  } unshare{serving.control.get()};
  // The server binds on its own thread while the node sets up: its answer
  // is awaited here, before any worker starts or any rendezvous is joined.
  if (serving.server) {
    try {
      log->info("serving metrics and the HTTP API on http://{}:{} (/metrics, /status)",
                serving.server->host(), serving.server->port());
    } catch (const NetworkError& e) {
      throw ConfigError(std::string("--server-port/--metrics-port: ") + e.what());
    }
  }
  const int code = config.dynamic ? run_dynamic(config, node) : run_fixed(config, node);
  // Its thread ends beside the node's teardown; run_agent's end joins it.
  if (serving.server) serving.server->stop();
  return code;
}

}  // namespace

int run_agent(const AgentConfig& config) {
  auto log = util::logger("agent");
  Serving serving;
  if (config.serve_port) {
    serving.metrics =
        std::make_unique<serve::AgentMetrics>(config.dynamic ? config.rdzv.run_id : config.run_id,
                                              config.event_log.host, config.nproc_per_node);
    serving.control = std::make_unique<AgentJobControl>(config);
  }
  const std::unique_ptr<events::EventLog> event_log = open_event_log(config, serving.observers());
  events::EventLog& events = event_log ? *event_log : events::EventLog::disabled();
  if (config.serve_port) {
    serving.server = std::make_unique<serve::HttpServer>(
        serve::ServerOptions{config.serve_host, *config.serve_port, config.rdzv.secret},
        serving.metrics.get(), serving.control.get());
  }
  events.record(events::type::kAgentStart, agent_start_fields(config));
  std::unique_ptr<SpotWatch> spot;
  if (!config.spot_notice.url.empty()) spot = std::make_unique<SpotWatch>(config.spot_notice);
  const int code = run_node(config, events, serving);
  events.record(events::type::kAgentEnd, {{"exit_code", code}});
  return code;
}

}  // namespace elasticrun::agent
