#include "agent/fixed_agent.hpp"

#include <memory>

#include "agent/addresses.hpp"
#include "agent/attempt.hpp"
#include "agent/embedded_store.hpp"
#include "agent/failure_report.hpp"
#include "agent/monitored_round.hpp"
#include "agent/pid1_signals.hpp"
#include "agent/static_restart.hpp"
#include "elasticrun/errors.hpp"
#include "elasticrun/store_client.hpp"
#include "events/types.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {

namespace {

using supervisor::WorkerExit;

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

// One attempt of a fixed job: a failure here asks the other nodes of a
// static multi-node job to restart too (through the restarts' courier).
// It also runs the attempt's health monitors.
class FixedRound final : public MonitoredRound {
 public:
  FixedRound(const AgentConfig& config, const NodeContext& node, StaticRestarts* restarts,
             int attempt)
      : MonitoredRound(config, node.control, node.gpu, *node.events, node.metrics),
        config_(config),
        node_(node),
        restarts_(restarts),
        attempt_(attempt) {
    if (node_.control) node_.control->reset(static_cast<uint64_t>(attempt));
  }

  void on_failure(const WorkerExit& e) override {
    tell_others("local rank " + std::to_string(e.local_rank) + " " + e.describe());
  }

  void on_fault(const health::Fault& fault) override { tell_others(fault.describe()); }

  // Another node failed: this node's workers stop as after a failure here.
  bool tell_stop(supervisor::WorkerGroup& workers) override {
    (void)workers;
    publish_failure("a worker failed on another node");
    return false;
  }

 private:
  // This node's survivors learn it from the control block (their SDK
  // releases their collectives), the other nodes from the restart request.
  void tell_others(const std::string& what) {
    publish_failure(what);
    if (!restarts_) return;
    restarts_->request_restart(attempt_,
                               "node rank " + std::to_string(config_.node_rank) + ": " + what);
  }

  void publish_failure(const std::string& why) {
    if (!node_.control) return;
    control::ControlBlock::Event ev;
    ev.generation = static_cast<uint64_t>(attempt_);
    ev.kind = control::EventKind::restart;
    ev.reason = why;
    node_.control->publish_event(ev);
  }

  const AgentConfig& config_;
  const NodeContext& node_;
  StaticRestarts* restarts_;  // null: nobody else to tell
  int attempt_;
};

// The restart policy's decision for the failure of attempt `restart`: node
// 0's in a static job of several nodes, which the others follow. A full-job
// restart discards what this node keeps across attempts: its warm
// interpreters.
health::RestartDecision decide_restart(const AgentConfig& config, const NodeContext& node,
                                       health::RestartPolicy& policy, StaticRestarts* restarts,
                                       int restart) {
  health::RestartDecision d;
  if (restarts && config.node_rank != 0) {
    d = restarts->decision(restart);
  } else {
    d = policy.on_failure(
        std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now()));
    if (restarts) restarts->publish_decision(restart, d);
  }
  node.events->record(
      events::type::kRestartDecision,
      {{"restart_count", restart}, {"action", health::to_string(d.action)}, {"reason", d.reason}});
  if (d.action == health::RestartAction::kFullJob) {
    util::logger("agent")->warn("a full-job restart: {}", d.reason);
    if (node.warm) node.warm->renew();
  }
  return d;
}

}  // namespace

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
  if (!config.standalone && config.nnodes > 1 &&
      (config.max_restarts > 0 || config.restart_policy)) {
    restarts = std::make_unique<StaticRestarts>(config, job_store_port);
  }
  // What each failure costs: torchrun's --max-restarts, or the job config's
  // restart policy (health/restart_policy.hpp).
  health::RestartPolicy policy(
      config.restart_policy,
      config.restart_policy ? config.restart_cap : std::optional<int>(config.max_restarts));
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

    node.events->record(events::type::kRoundStart,
                        {{"round", restart},
                         {"group_rank", a.group_rank},
                         {"nodes", a.group_world_size},
                         {"world_size", a.world_size},
                         {"rank_offset", a.rank_offset},
                         {"restart_count", restart},
                         {"master", a.master_addr + ":" + std::to_string(a.master_port)}});
    FixedRound round(config, node, restarts.get(), restart);
    Inbox inbox;
    std::unique_ptr<StaticRestarts::Watch> watch;
    if (restarts) watch = std::make_unique<StaticRestarts::Watch>(*restarts, restart, inbox);
    AttemptResult r = run_attempt(config, node, a, restart, round, &inbox);
    end_on_signals_as_pid1(config.signals_to_handle);  // the attempt's handlers are gone
    watch.reset();
    if (r.outcome == Outcome::kSucceeded) {
      exit_barrier(config, job_store_port);
      log->info("all {} worker(s) succeeded", config.nproc_per_node);
      return 0;
    }
    if (r.outcome == Outcome::kSignaled) return 128 + r.stop_signal;
    if (restarts && r.outcome == Outcome::kFailed && r.failures.empty() && !r.fault) {
      restarts->request_restart(restart, "node rank " + std::to_string(config.node_rank) +
                                             ": the pre-train script failed");
    }
    // The other nodes must see this node's request before it starts again.
    if (restarts) restarts->flush();
    const health::RestartDecision d = decide_restart(config, node, policy, restarts.get(), restart);
    if (d.action != health::RestartAction::kFail) {
      if (!config.restart_policy) {
        log->warn("restarting workers ({} of {} restarts used)", restart + 1, config.max_restarts);
      } else {
        log->warn("restarting workers: {}", d.reason);
      }
      if (attempt_store) {
        attempt_store->request_stop();
        retired_store = std::move(attempt_store);
      }
      continue;
    }
    if (config.restart_policy) log->error("no restart: {}", d.reason);
    if (r.outcome == Outcome::kStopped) {
      log->error("the workers were stopped ({}) and no restart is left",
                 r.stop_reason.value_or("no reason given"));
      return 1;
    }
    if (r.failures.empty() && !r.fault) return 1;  // the pre-train script failed; already logged
    failure_report(config, r).print(a.rank_offset);
    return 1;
  }
}

}  // namespace elasticrun::agent
