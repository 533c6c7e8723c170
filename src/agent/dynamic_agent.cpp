#include "agent/dynamic_agent.hpp"

#include <unistd.h>

#include <functional>
#include <thread>

#include "agent/addresses.hpp"
#include "agent/courier.hpp"
#include "agent/embedded_store.hpp"
#include "agent/failure_report.hpp"
#include "agent/memory_handoff.hpp"
#include "agent/memory_replicator.hpp"
#include "agent/pid1_signals.hpp"
#include "agent/round.hpp"
#include "agent/store_standby.hpp"
#include "control/control_block.hpp"
#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "memory/peer.hpp"
#include "memory/replication_plan.hpp"
#include "memory/restore_plan.hpp"
#include "rendezvous/heartbeat.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

using rendezvous::EndKind;
using rendezvous::EndRecord;

// A node started on the lost store's host (its replacement) finds the
// standby serving: the store moved there for good.
bool standby_took_over(const rendezvous::RendezvousConfig& r) {
  if (r.standby_host.empty()) return false;
  rendezvous::RendezvousConfig alone = r;
  alone.store_host = r.standby_host;
  alone.store_port = r.standby_port;
  alone.standby_host.clear();
  try {
    (void)rendezvous::connect_store(alone, std::chrono::milliseconds(500),
                                    std::chrono::milliseconds(500));
    return true;
  } catch (const Error&) {
    return false;  // not up, or still a standby (it says so and closes)
  }
}

// The rendezvous store: hosted here when the endpoint is this machine and
// nobody on it serves the port yet; otherwise we are a client.
std::unique_ptr<EmbeddedStore> maybe_host_store(const AgentConfig& c) {
  auto log = util::logger("agent");
  const auto& r = c.rdzv;
  if (c.host_store == AgentConfig::HostStore::kNo) return nullptr;
  if (c.host_store == AgentConfig::HostStore::kAuto && !is_local_address(r.store_host)) {
    return nullptr;
  }
  if (standby_took_over(r)) {
    // A fresh store here would be a second one, empty: the job is there.
    log->info("the rendezvous store's standby on {}:{} serves the job (it took over): joining it",
              r.standby_host, r.standby_port);
    return nullptr;
  }
  try {
    auto s = std::make_unique<EmbeddedStore>(resolve_numeric(r.store_host), r.store_port, r.secret);
    log->info("hosting the rendezvous store on {}:{}", r.store_host, s->port());
    return s;
  } catch (const NetworkError& e) {
    if (c.host_store == AgentConfig::HostStore::kYes) throw;
    // Another agent (or elasticctl store) on this machine got there first.
    log->info("not hosting the rendezvous store: {}; joining it as a client", e.what());
    return nullptr;
  }
}

// The store's standby (--rdzv-conf standby_endpoint): served here when its
// host is this machine, this agent does not host the store itself, and no
// other agent here serves it yet.
std::unique_ptr<StoreStandby> maybe_host_standby(const AgentConfig& c) {
  const auto& r = c.rdzv;
  if (r.standby_host.empty() || c.host_store == AgentConfig::HostStore::kNo) return nullptr;
  if (!is_local_address(r.standby_host)) return nullptr;
  try {
    return std::make_unique<StoreStandby>(r);
  } catch (const NetworkError& e) {
    util::logger("agent")->info("not serving the store's standby: {}", e.what());
    return nullptr;
  }
}

// One node's run of rounds, on the agent's main thread. Each round's state
// is a Round (round.hpp), which is also its attempt's delegate; what lives
// across rounds is here: the rendezvous connection, the heartbeat, the
// courier, the stores (the control block is the node's: NodeContext).
class DynamicAgent {
 public:
  DynamicAgent(const AgentConfig& c, const NodeContext& node)
      : config_(c), node_(node), rc_(c.rdzv) {
    rc_.events = node.events;
  }

  int run() {
    rdzv_store_ = maybe_host_store(config_);
    if (rdzv_store_) rc_.store_port = rdzv_store_->port();
    if (!rdzv_store_) standby_ = maybe_host_standby(config_);
    if (!config_.host_discovery.script.empty()) {
      discovery_ = std::make_unique<HostDiscovery>(config_.host_discovery);
      rc_.hosts = discovery_.get();
    }
    heartbeat_ = std::make_unique<rendezvous::Heartbeat>(rc_, &beat_);
    rdzv_ = std::make_unique<rendezvous::Rendezvous>(rc_);
    courier_ = std::make_unique<Round::Courier>(std::make_unique<rendezvous::Rendezvous>(rc_));
    serve_memory();
    const int code = rounds();
    // Parked workers no round will take exit before this node's store goes.
    parked_.reset();
    // The courier's last errands (a leave's end record) go out before the
    // store this node may host stops.
    courier_.reset();
    linger_while_store_in_use();
    return code;
  }

 private:
  int rounds() {
    bool released = false;
    wait_for_warm_interpreters();
    for (int attempt = 0;; ++attempt) {
      rendezvous::Assignment place;
      try {
        place = rdzv_->join(released);
      } catch (const rendezvous::RendezvousClosed& e) {
        if (e.failed()) {
          log_->error("{}", e.what());
          // The node whose workers failed last prints torchrun's report.
          if (!last_failure_.failures.empty() || last_failure_.fault) {
            failure_report(config_, last_failure_).print(last_rank_offset_);
          }
          return 1;
        }
        log_->info("{}", e.what());
        return 0;
      }
      released = false;
      if (place.full_restart) {
        log_->warn("round {}: a full-job restart: this node's warm interpreters start afresh",
                   place.round);
        if (node_.warm) node_.warm->renew();
        // A full-job restart starts every process afresh, parked or not.
        parked_.reset();
      }
      const Assignment a = start_round(place);
      record_round_start(place, a);
      restored_step_ = 0;
      const std::vector<std::string> leavers = memory_leavers(place);
      if (!parked_) restore_memory(place, leavers);
      // The leavers serving their tiers wait for every member's restore.
      if (!leavers.empty()) take_memory_handoff(place);
      if (node_.control && !parked_) node_.control->reset(place.round);
      Round round(config_, rc_, place, node_.control, *courier_, beat_, node_.gpu, node_.metrics);
      std::unique_ptr<MemoryReplicator> replicator = start_replicator(place);
      AttemptResult r =
          run_attempt(config_, node_, a, attempt, round, &round.inbox(), std::move(parked_));
      replicator.reset();  // the tier is this thread's again
      parked_ = std::move(r.parked);
      end_on_signals_as_pid1(config_.signals_to_handle);  // the attempt's handlers are gone
      // What the attempt asked the courier to write (a failure's end
      // record) is in the store before this node looks at the round's end.
      courier_->drain();
      // This node's workers are gone (or parked): what they saved is adopted.
      memory::Tier::Holding held;
      if (!parked_) held = publish_memory(place.round);

      // Signaled, or stopped with the others after a signal: this node leaves.
      if (r.outcome == Outcome::kSignaled || r.stop_signal != 0) {
        hand_off_memory(place, held);
        return 128 + r.stop_signal;
      }
      if (r.outcome == Outcome::kSucceeded) return exit_barrier(place);
      if (r.outcome == Outcome::kFailed) {
        if (r.failures.empty() && !r.fault) {
          round.fail("the pre-train script failed");
          courier_->drain();
        }
        last_failure_ = r;
        last_rank_offset_ = a.rank_offset;
      }
      // The round is over one way or another: whoever ended it wrote why.
      std::optional<EndRecord> e = round.end();
      if (!e) e = rdzv_->wait_end(place.round, rc_.heartbeat_interval * rc_.missed_heartbeats);
      if (!e) {
        log_->error("round {}: the workers stopped but nobody ended the round; rejoining",
                    place.round);
        continue;
      }
      node_.events->record(events::type::kRoundEnd, {{"round", place.round},
                                                     {"kind", rendezvous::to_string(e->kind)},
                                                     {"reason", e->reason},
                                                     {"target", e->target},
                                                     {"release", e->release}});
      if (e->kind == EndKind::kFail) {
        log_->error("the job failed on another node: {}", e->reason);
        return 1;
      }
      if (e->kind == EndKind::kDone) return 0;
      if (e->release > 0 && place.group_rank >= place.group_world_size - e->release) {
        released = true;
        // --inprocess-restart: a spare keeps its parked workers (a hot
        // spare), and they re-form at once when the job takes the node back.
        log_->info("this node gives its place back (release); it waits as a spare{}",
                   parked_ ? fmt::format(" with {} parked worker(s)", parked_->count()) : "");
      }
      log_->info("round {} over ({}): rejoining", place.round, rendezvous::to_string(e->kind));
    }
  }

  // The memory tier's server, and this node's holdings in the store before
  // its first join (docs/memory-tier.md).
  void serve_memory() {
    if (!node_.memory) return;
    try {
      peer_ = std::make_unique<memory::PeerServer>(resolve_numeric(rc_.host), *node_.memory,
                                                   rc_.secret);
    } catch (const NetworkError& e) {
      log_->warn("{}: peers cannot fetch this node's snapshots", e.what());
      return;
    }
    publish_memory(0);
  }

  // Returns what it published (nothing without a peer server). `round`:
  // the round whose restore or end this follows (0: before the first).
  memory::Tier::Holding publish_memory(uint64_t round) {
    if (!peer_) return {};
    memory::Tier::Holding h = node_.memory->adopt();
    try {
      rdzv_->publish_memory({rc_.host, peer_->port(), h.step, h.snapshots, h.fetched, round});
    } catch (const Error& e) {
      log_->warn("cannot publish this node's memory snapshots: {}", e.what());
    }
    return h;
  }

  // A graceful leave (agent/memory_handoff.hpp): this node's own shards of
  // its newest step (the leave's agreed step) are served until the next
  // round's members have restored them. Without a peer server there is
  // nothing to serve, and the offer says so.
  void hand_off_memory(const rendezvous::Assignment& place, const memory::Tier::Holding& held) {
    std::vector<std::string> shards;
    if (peer_) shards = memory::newest_shards(memory::own_snapshots(held.snapshots, held.fetched));
    serve_memory_handoff(*rdzv_, place.round, place.group_world_size, shards,
                         2 * rc_.rejoin_timeout, *node_.events);
  }

  // The nodes that left the round before this one gracefully and serve
  // their memory tiers until its members have restored: waited for as long
  // as a silent node takes to count as lost.
  std::vector<std::string> memory_leavers(const rendezvous::Assignment& place) {
    if (!node_.memory || place.round < 2) return {};
    try {
      return rdzv_->memory_offers(place.round - 1, rc_.heartbeat_interval * rc_.missed_heartbeats);
    } catch (const Error& e) {
      log_->warn("round {}: cannot read the memory tiers the leavers offer: {}", place.round,
                 e.what());
      return {};
    }
  }

  void take_memory_handoff(const rendezvous::Assignment& place) {
    try {
      rdzv_->memory_taken(place.round - 1);
    } catch (const Error& e) {
      log_->warn("round {}: cannot tell the leavers this node restored: {}", place.round, e.what());
    }
  }

  // Before the round's workers start: the newest step the members' memory
  // tiers can restore together, and what of it this node lacks (a node that
  // replaces a lost one or joins holds nothing; a sharded state needs every
  // rank's shards), fetched from the members that hold it.
  // `leavers`: nodes that left the round before and serve their tiers;
  // holders after the members.
  void restore_memory(const rendezvous::Assignment& place,
                      const std::vector<std::string>& leavers) {
    if (!peer_) return;
    std::vector<memory::PeerHolding> members;
    try {
      std::vector<std::string> holders = rdzv_->members(place.round);
      holders.insert(holders.end(), leavers.begin(), leavers.end());
      for (const auto& h : rdzv_->memory_of(holders)) {
        if (h) members.push_back({h->host, h->port, h->snapshots});
      }
    } catch (const Error& e) {
      log_->warn("round {}: cannot read the members' memory snapshots: {}", place.round, e.what());
      return;
    }
    memory::Tier::Holding mine = node_.memory->adopt();
    memory::RestorePlan plan = memory::plan_restore(members, mine.snapshots);
    // The replicas of the step restored, checked again before the workers
    // load them here: one whose bytes changed in memory since it arrived
    // is removed, and fetched afresh from another member that holds it.
    bool bad = false;
    for (const auto& name : mine.fetched) {
      const auto n = memory::SnapshotName::parse(name);
      if (!n || n->step != plan.step) continue;
      if (const util::Status st = node_.memory->verify(name); !st) {
        log_->error("round {}: {}", place.round, st.message());
        bad = true;
      }
    }
    if (bad) {
      mine = node_.memory->adopt();
      plan = memory::plan_restore(members, mine.snapshots);
    }
    for (const auto& why : plan.incomplete) {
      log_->warn("round {}: not restoring the memory snapshots of {}", place.round, why);
    }
    // What is newer than the step restored, the job trains again: kept, a
    // later restore could take it for the new run's state of its step.
    restored_step_ = plan.step;
    const size_t abandoned = plan.step > 0 ? node_.memory->remove_newer_than(plan.step) : 0;
    if (abandoned > 0) {
      log_->info(
          "round {}: removed {} memory snapshot(s) newer than step {}, which the job "
          "trains again",
          place.round, abandoned, plan.step);
    }
    if (plan.fetches.empty()) {
      if (abandoned > 0 || bad) publish_memory(place.round);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = 0;
    size_t fetched = 0;
    for (const auto& f : plan.fetches) {
      bool got = false;
      for (const size_t i : f.holders) {
        const util::Status st = memory::fetch_snapshot(members[i].host, members[i].port, f.snapshot,
                                                       *node_.memory, {.secret = rc_.secret});
        if (st) {
          got = true;
          if (const auto m = node_.memory->manifest(f.snapshot)) bytes += m->bytes();
          break;
        }
        log_->warn("round {}: {}", place.round, st.message());
      }
      fetched += got;
      if (!got) {
        log_->warn(
            "round {}: no member could send the memory snapshot {}; the workers "
            "restore from an older one or from the checkpoint directory",
            place.round, f.snapshot);
      }
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    nlohmann::json incomplete = nlohmann::json::array();
    for (const auto& why : plan.incomplete) incomplete.push_back(why);
    node_.events->record(events::type::kMemoryFetch, {{"round", place.round},
                                                      {"step", plan.step},
                                                      {"snapshots", fetched},
                                                      {"failed", plan.fetches.size() - fetched},
                                                      {"bytes", bytes},
                                                      {"seconds", static_cast<double>(ms) / 1000.0},
                                                      {"incomplete", incomplete}});
    if (fetched > 0 || abandoned > 0 || bad) publish_memory(place.round);
    if (fetched > 0) {
      log_->info(
          "round {}: fetched {} memory snapshot(s) of step {} ({} bytes) from the members "
          "in {} ms",
          place.round, fetched, plan.step, bytes, ms);
    }
  }

  // While the round's workers run: this node's snapshots listed as they
  // appear, the members' placed here replicated, older shards pruned.
  std::unique_ptr<MemoryReplicator> start_replicator(const rendezvous::Assignment& place) {
    if (!node_.memory) return nullptr;
    MemoryReplicator::Options o;
    o.round = place.round;
    try {
      if (!replica_store_) replica_store_ = std::make_unique<rendezvous::Rendezvous>(rc_);
      o.members = rdzv_->members(place.round);
    } catch (const Error& e) {
      log_->warn("round {}: no memory replication: {}", place.round, e.what());
      return nullptr;
    }
    o.me = static_cast<size_t>(place.group_rank);
    o.restored_step = restored_step_;
    o.replicas = config_.memory_replicas;
    o.bytes_per_second = config_.memory_replication_rate;
    o.secret = rc_.secret;
    if (peer_) {
      o.host = rc_.host;
      o.port = peer_->port();
    }
    return std::make_unique<MemoryReplicator>(std::move(o), *node_.memory, *replica_store_,
                                              *node_.events);
  }

  // --warm-start: offer this node only once its workers can start at once;
  // a running job then stops for it for a moment, not for an interpreter's
  // start and `import torch`.
  void wait_for_warm_interpreters() {
    if (!node_.warm || node_.warm->idle() == 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    log_->info("waiting for {} warm interpreter(s) to finish their imports before joining",
               node_.warm->idle());
    const size_t ready = node_.warm->wait_ready(std::chrono::seconds(120));
    log_->info(
        "{} warm interpreter(s) ready after {} ms", ready,
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }

  void record_round_start(const rendezvous::Assignment& place, const Assignment& a) {
    node_.events->record(events::type::kRoundStart,
                         {{"round", place.round},
                          {"group_rank", place.group_rank},
                          {"nodes", place.group_world_size},
                          {"world_size", place.world_size},
                          {"rank_offset", place.rank_offset},
                          {"restart_count", a.restart_count},
                          {"full_restart", place.full_restart},
                          {"master", a.master_addr + ":" + std::to_string(a.master_port)}});
  }

  // Where this node's workers sit in the new round; group rank 0 hosts a
  // fresh store for the workers, so no round reads another's keys.
  Assignment start_round(const rendezvous::Assignment& place) {
    if (worker_store_) {
      worker_store_->request_stop();
      retired_store_ = std::move(worker_store_);
    }
    if (place.group_rank == 0) {
      worker_store_ = std::make_unique<EmbeddedStore>(resolve_numeric(rc_.host), 0);
      rdzv_->publish_master(place.round, rc_.host, worker_store_->port());
    }
    Assignment a;
    std::tie(a.master_addr, a.master_port) = rdzv_->master(place.round);
    a.group_rank = place.group_rank;
    a.group_world_size = place.group_world_size;
    a.local_world_size = config_.nproc_per_node;
    a.rank_offset = place.rank_offset;
    a.world_size = place.world_size;
    a.restart_count = static_cast<int>(rdzv_->failures());
    a.generation = place.round;
    return a;
  }

  // Every node of the round waits until all have succeeded; the last one
  // ends the round as done and marks the job finished, so that spares and
  // late joiners exit too.
  int exit_barrier(const rendezvous::Assignment& place) {
    try {
      log_->info("all {} worker(s) succeeded; waiting for the other nodes", config_.nproc_per_node);
      const int64_t arrived = rdzv_->arrive_done(place.round);
      if (arrived >= place.group_world_size) {
        EndRecord rec;
        rec.kind = EndKind::kDone;
        rec.reason = "every worker succeeded";
        rdzv_->end_round(place.round, rec);
        rdzv_->mark_job_finished(false, rec.reason);
      }
      auto e = rdzv_->wait_end(place.round, config_.exit_barrier_timeout);
      if (!e) {
        log_->error(
            "the other nodes did not finish within {} s",
            std::chrono::duration_cast<std::chrono::seconds>(config_.exit_barrier_timeout).count());
      } else if (e->kind != EndKind::kDone) {
        // As torchrun: this node's workers succeeded, so its run did.
        log_->warn("this node's workers succeeded, but {}", describe(*e));
      }
    } catch (const Error& e) {
      log_->error("error waiting on the exit barrier: {}", e.what());
    }
    return 0;
  }

  // The node hosting the rendezvous store keeps serving it until every
  // other agent has disconnected: at the end of the job they exit as soon as
  // they have read it; when this node leaves early (a signal), the others
  // keep their store and the job goes on. A second signal (default action,
  // the agent's handlers are gone) or SIGKILL ends it at once.
  // The same for a standby that took over (it is the store now).
  void linger_while_store_in_use() {
    std::function<uint64_t()> open;
    if (rdzv_store_) open = [this] { return rdzv_store_->open_connections(); };
    if (standby_ && standby_->serving()) open = [this] { return standby_->open_connections(); };
    if (!open) return;
    heartbeat_.reset();
    rdzv_.reset();
    replica_store_.reset();
    if (open() > 0) {
      log_->info(
          "this node hosts the rendezvous store: serving it until the other {} "
          "connection(s) close",
          open());
    }
    while (open() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  const AgentConfig& config_;
  const NodeContext& node_;
  // Before rc_, which points at it.
  std::unique_ptr<HostDiscovery> discovery_;
  rendezvous::RendezvousConfig rc_;
  std::unique_ptr<EmbeddedStore> rdzv_store_;
  std::unique_ptr<StoreStandby> standby_;  // the store's standby, when served here
  rendezvous::BeatProgress beat_;          // written by the rounds' loops, read by the heartbeat
  std::unique_ptr<rendezvous::Heartbeat> heartbeat_;
  std::unique_ptr<rendezvous::Rendezvous> rdzv_;  // this thread's
  std::unique_ptr<Round::Courier> courier_;       // store errands of the rounds' loops
  AttemptResult last_failure_;                    // this node's last failed attempt, for the report
  int last_rank_offset_ = 0;
  std::unique_ptr<EmbeddedStore> worker_store_, retired_store_;
  // --inprocess-restart: the last attempt's workers, parked for the next round.
  std::shared_ptr<ParkedWorkers> parked_;
  std::unique_ptr<memory::PeerServer> peer_;  // serves node_.memory to the peers
  // The step this round's restore chose (0: none): the replicator keeps
  // what is older until a newer step is safe, since the workers may load
  // an older one (a node's fetch failed).
  int64_t restored_step_ = 0;
  // The replicators' store connection (one runs at a time, in an attempt).
  std::unique_ptr<rendezvous::Rendezvous> replica_store_;
  std::shared_ptr<spdlog::logger> log_ = util::logger("agent");
};

}  // namespace

int run_dynamic(const AgentConfig& config, const NodeContext& node) {
  DynamicAgent agent(config, node);
  return agent.run();
}

}  // namespace elasticrun::agent
