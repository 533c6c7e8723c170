#include "agent/agent.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "agent/attempt.hpp"
#include "agent/dynamic_agent.hpp"
#include "agent/embedded_store.hpp"
#include "agent/failure_report.hpp"
#include "agent/static_restart.hpp"
#include "agent/worker_env.hpp"
#include "elasticrun/errors.hpp"
#include "elasticrun/store_client.hpp"
#include "supervisor/cgroup.hpp"
#include "supervisor/death_watch.hpp"
#include "supervisor/log_pump.hpp"
#include "supervisor/worker_group.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;
using supervisor::WorkerExit;

std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < 8; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

// torchrun's layout: <log_dir or a fresh temp dir>/<run_id>_<random>/attempt_<n>/<local_rank>/
fs::path make_run_dir(const AgentConfig& c) {
  fs::path base;
  if (!c.log_dir.empty()) {
    base = c.log_dir;
    fs::create_directories(base);
  } else {
    // Python's mkdtemp(prefix="torchelastic_"): 8 characters of [a-z0-9_].
    for (;;) {
      base = fs::temp_directory_path() / ("torchelastic_" + random_suffix());
      if (fs::create_directory(base)) break;
    }
    fs::permissions(base, fs::perms::owner_all, fs::perm_options::replace);
  }
  for (;;) {
    fs::path dir = base / (c.run_id + "_" + random_suffix());
    if (fs::create_directory(dir)) return dir;
  }
}

}  // namespace

// The first address a name resolves to, as text ("127.0.0.1", "::1"); the
// name itself when it does not resolve.
std::string resolve_numeric(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  char buf[INET6_ADDRSTRLEN] = {};
  std::string out = host;
  if (::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) ==
      0) {
    out = buf;
  }
  ::freeaddrinfo(res);
  return out;
}

namespace {

void wait_at_exit_barrier(const AgentConfig& c, int store_port);

// Every agent of a multi-node job waits here until all have finished, so
// that the node hosting the store does not take it away from the others.
void exit_barrier(const AgentConfig& c, int store_port) {
  if (c.nnodes <= 1) return;
  auto log = util::logger("agent");
  log->info("waiting up to {} s for the other agents at the exit barrier",
            std::chrono::duration_cast<std::chrono::seconds>(c.exit_barrier_timeout).count());
  try {
    wait_at_exit_barrier(c, store_port);
  } catch (const Error& e) {
    // As torchrun: this node's workers succeeded, so the run did; a peer
    // that never arrives is its own failure.
    log->error("error waiting on the exit barrier: {}", e.what());
  }
}

void wait_at_exit_barrier(const AgentConfig& c, int store_port) {
  StoreClientOptions opts;
  opts.key_prefix = "/elasticrun/" + c.run_id + "/";
  opts.connect_timeout = c.join_timeout;
  auto client = StoreClient::connect(c.master_addr, static_cast<uint16_t>(store_port), opts);
  const int64_t arrived = client.add("exit_barrier/count", 1);
  if (arrived >= c.nnodes) {
    client.set("exit_barrier/done", "1");
  } else {
    client.wait({"exit_barrier/done"}, c.exit_barrier_timeout);
  }
}

// The static and standalone backends: the node's place is fixed by the
// flags; each attempt restarts this node's workers in the same place.
int run_fixed(const AgentConfig& config, const NodeContext& node) {
  auto log = util::logger("agent");
  // The node hosting the store keeps it for the whole run; standalone jobs
  // get a fresh store each attempt, so a restarted job never reads keys of
  // the attempt before (PyTorch workers do not namespace them).
  std::unique_ptr<EmbeddedStore> job_store;
  if (!config.standalone && config.node_rank == 0) {
    job_store = std::make_unique<EmbeddedStore>(config.master_addr, config.master_port);
  }
  const int job_store_port = job_store ? job_store->port() : config.master_port;
  // Several nodes restart together, each attempt on a store of its own
  // (static_restart.hpp says why torchrun's way does not work).
  std::unique_ptr<StaticRestarts> restarts;
  if (!config.standalone && config.nnodes > 1 && config.max_restarts > 0) {
    restarts = std::make_unique<StaticRestarts>(config, job_store_port);
  }
  // Where "localhost" points, looked up once: a restart should not wait on
  // the resolver.
  const std::string standalone_bind = config.standalone ? resolve_numeric("localhost") : "";
  // The store of the attempt before, stopping on its own thread while the
  // next attempt starts; joined when it is replaced or at exit.
  std::unique_ptr<EmbeddedStore> retired_store;
  for (int restart = 0;; ++restart) {
    std::unique_ptr<EmbeddedStore> attempt_store;
    Assignment a;
    a.group_rank = config.node_rank;
    a.group_world_size = config.nnodes;
    a.local_world_size = config.nproc_per_node;
    a.rank_offset = config.node_rank * config.nproc_per_node;
    a.world_size = config.nnodes * config.nproc_per_node;
    a.restart_count = restart;
    if (config.standalone) {
      // torchrun gives standalone workers MASTER_ADDR=localhost; binding the
      // name puts the store on the address the workers' lookup finds first.
      attempt_store = std::make_unique<EmbeddedStore>(standalone_bind, 0);
      a.master_addr = "localhost";
      a.master_port = attempt_store->port();
    } else {
      a.master_addr = config.master_addr;
      a.master_port = job_store_port;
      if (restarts && restart > 0) {
        if (job_store) {
          attempt_store = std::make_unique<EmbeddedStore>(config.master_addr, 0);
          restarts->publish_worker_store(restart, attempt_store->port());
          a.master_port = attempt_store->port();
        } else {
          a.master_port = restarts->worker_store_port(restart);
        }
      }
    }

    AttemptHooks hooks;
    StopChannel stop;
    std::unique_ptr<StaticRestarts::Watch> watch;
    if (restarts) {
      hooks.stop = &stop;
      watch = std::make_unique<StaticRestarts::Watch>(*restarts, restart, stop);
      hooks.on_failure = [&](const WorkerExit& e) {
        restarts->request_restart(restart, "node rank " + std::to_string(config.node_rank) +
                                               ": local rank " + std::to_string(e.local_rank) +
                                               " " + e.describe());
      };
    }
    AttemptResult r = run_attempt(config, node, a, restart, hooks);
    watch.reset();
    if (r.outcome == Outcome::kSucceeded) {
      exit_barrier(config, job_store_port);
      log->info("all {} worker(s) succeeded", config.nproc_per_node);
      return 0;
    }
    if (r.outcome == Outcome::kSignaled) return 128 + r.stop_signal;
    if (restarts && r.outcome == Outcome::kFailed && r.failures.empty()) {
      restarts->request_restart(restart, "node rank " + std::to_string(config.node_rank) +
                                             ": the pre-train script failed");
    }
    if (restart < config.max_restarts) {
      log->warn("restarting workers ({} of {} restarts used)", restart + 1, config.max_restarts);
      if (attempt_store) {
        attempt_store->request_stop();
        retired_store = std::move(attempt_store);
      }
      continue;
    }
    if (r.outcome == Outcome::kStopped) {
      log->error("the workers were stopped ({}) and no restart is left",
                 r.stop_reason.value_or("no reason given"));
      return 1;
    }
    if (r.failures.empty()) return 1;  // the pre-train script failed; already logged
    FailureReport report{config.script_name, r.failures, r.error_files, config.agent_error_file};
    report.print(a.rank_offset);
    return 1;
  }
}

}  // namespace

int run_agent(const AgentConfig& config) {
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
  supervisor::DeathWatch watch;
  st = watch.start(&job_cgroup);
  if (!st) log->warn("{}; workers' descendants may outlive a killed agent", st.message());

  NodeContext node;
  node.watch = &watch;
  node.job_cgroup = &job_cgroup;
  node.run_dir = make_run_dir(config);
  char hostbuf[256] = {};
  ::gethostname(hostbuf, sizeof(hostbuf) - 1);
  node.host = hostbuf;
  node.base = current_environment();
  node.cpu_sets = std::move(cpu_sets);
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
  if (config.dynamic) return run_dynamic(config, node);
  return run_fixed(config, node);
}

}  // namespace elasticrun::agent
