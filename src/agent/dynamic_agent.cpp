#include "agent/dynamic_agent.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include "agent/embedded_store.hpp"
#include "agent/failure_report.hpp"
#include "elasticrun/errors.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/round_watch.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

using rendezvous::EndKind;
using rendezvous::EndRecord;

std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (::getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
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
  try {
    auto s = std::make_unique<EmbeddedStore>(resolve_numeric(r.store_host), r.store_port);
    log->info("hosting the rendezvous store on {}:{}", r.store_host, s->port());
    return s;
  } catch (const NetworkError& e) {
    if (c.host_store == AgentConfig::HostStore::kYes) throw;
    // Another agent (or elasticctl store) on this machine got there first.
    log->info("not hosting the rendezvous store: {}; joining it as a client", e.what());
    return nullptr;
  }
}

// The record that ends a round, shared between the watch thread and the loop.
class EndBox {
 public:
  void set(const EndRecord& r) {
    std::lock_guard lock(mu_);
    if (!rec_) rec_ = r;
  }
  std::optional<EndRecord> get() const {
    std::lock_guard lock(mu_);
    return rec_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<EndRecord> rec_;
};

std::string describe(const EndRecord& r) {
  std::string s = std::string("the round ended (") + rendezvous::to_string(r.kind) + ")";
  if (!r.reason.empty()) s += ": " + r.reason;
  return s;
}

// One node's run of rounds.
class DynamicAgent {
 public:
  DynamicAgent(const AgentConfig& c, const NodeContext& node)
      : config_(c), node_(node), rc_(c.rdzv) {}

  int run() {
    rdzv_store_ = maybe_host_store(config_);
    if (rdzv_store_) rc_.store_port = rdzv_store_->port();
    heartbeat_ = std::make_unique<rendezvous::Heartbeat>(rc_);
    rdzv_ = std::make_unique<rendezvous::Rendezvous>(rc_);
    const int code = rounds();
    linger_while_store_in_use();
    return code;
  }

 private:
  int rounds() {
    bool released = false;
    for (int attempt = 0;; ++attempt) {
      try {
        round_ = rdzv_->join(released);
      } catch (const rendezvous::RendezvousClosed& e) {
        if (e.failed()) {
          log_->error("{}", e.what());
          // The node whose workers failed last prints torchrun's report.
          if (!last_failure_.failures.empty()) {
            FailureReport{config_.script_name, last_failure_.failures, last_failure_.error_files,
                          config_.agent_error_file}
                .print(last_rank_offset_);
          }
          return 1;
        }
        log_->info("{}", e.what());
        return 0;
      }
      released = false;
      Assignment a = start_round();
      EndBox end;
      StopChannel stop;
      rendezvous::WatchOptions wo;
      wo.assignment = round_;
      wo.policy = config_.policy;
      wo.on_end = [&](const EndRecord& r) {
        end.set(r);
        stop.post(describe(r));
      };
      auto watch = std::make_unique<rendezvous::RoundWatch>(rc_, wo);
      AttemptHooks hooks;
      hooks.stop = &stop;
      hooks.on_failure = [&](const supervisor::WorkerExit& e) { on_local_failure(e.describe()); };
      hooks.on_signal = [&](int sig) { on_leave(supervisor::signal_name(sig)); };
      AttemptResult r = run_attempt(config_, node_, a, attempt, hooks);

      if (r.outcome == Outcome::kSignaled) return 128 + r.stop_signal;
      if (r.outcome == Outcome::kSucceeded) return exit_barrier();
      if (r.outcome == Outcome::kFailed) {
        if (r.failures.empty()) on_local_failure("the pre-train script failed");
        last_failure_ = r;
        last_rank_offset_ = a.rank_offset;
      }
      // The round is over one way or another: whoever ended it wrote why.
      std::optional<EndRecord> e = end.get();
      if (!e) e = rdzv_->wait_end(round_.round, rc_.heartbeat_interval * rc_.missed_heartbeats);
      if (!e) {
        log_->error("round {}: the workers stopped but nobody ended the round; rejoining",
                    round_.round);
        continue;
      }
      if (e->kind == EndKind::kFail) {
        log_->error("the job failed on another node: {}", e->reason);
        return 1;
      }
      if (e->kind == EndKind::kDone) return 0;
      if (e->release > 0 && round_.group_rank >= round_.group_world_size - e->release) {
        log_->info("this node gives its place back (release); it waits as a spare");
        released = true;
      }
      log_->info("round {} over ({}): rejoining", round_.round, rendezvous::to_string(e->kind));
    }
  }

  // Where this node's workers sit in the new round; group rank 0 hosts a
  // fresh store for the workers, so no round reads another's keys.
  Assignment start_round() {
    if (worker_store_) {
      worker_store_->request_stop();
      retired_store_ = std::move(worker_store_);
    }
    if (round_.group_rank == 0) {
      worker_store_ = std::make_unique<EmbeddedStore>(resolve_numeric(rc_.host), 0);
      rdzv_->publish_master(round_.round, rc_.host, worker_store_->port());
    }
    Assignment a;
    std::tie(a.master_addr, a.master_port) = rdzv_->master(round_.round);
    a.group_rank = round_.group_rank;
    a.group_world_size = round_.group_world_size;
    a.local_world_size = config_.nproc_per_node;
    a.rank_offset = round_.rank_offset;
    a.world_size = round_.world_size;
    a.restart_count = static_cast<int>(rdzv_->failures());
    a.generation = round_.round;
    return a;
  }

  // A worker of this node failed: end the round for everyone at once. The
  // next round's closer decides whether it costs a restart (it does not
  // when a member was lost: the lost node's peers fail in their collectives
  // before anyone can tell) and fails the job when --max-restarts is spent.
  void on_local_failure(const std::string& what) {
    try {
      EndRecord rec;
      rec.kind = EndKind::kRestart;
      rec.target = round_.group_world_size;
      rec.survivors = round_.group_world_size;
      rec.wait = rc_.rejoin_timeout;
      rec.reason = "a worker on " + rc_.host + " failed (" + what + ")";
      const EndRecord now = rdzv_->end_round(round_.round, rec);
      if (now.serialize() == rec.serialize()) {
        log_->warn("round {}: {}; ending the round", round_.round, rec.reason);
      }
    } catch (const Error& e) {
      log_->error("cannot tell the other nodes about the failure: {}", e.what());
    }
  }

  // A handled signal reached the agent: this node is going away (a spot
  // notice, a preemption). The others continue without it.
  void on_leave(const std::string& signal) {
    try {
      rdzv_->announce_leaving(round_.round);
      elastic::Policy policy(config_.policy);
      elastic::Observation o;
      o.current = round_.group_world_size;
      o.waiting = rdzv_->waiting_after(round_.round);
      o.leaving = 1;
      const elastic::Decision d = policy.decide(o);
      EndRecord rec;
      rec.kind = EndKind::kScaleDown;
      rec.target = d.target > 0 ? d.target : std::max(round_.group_world_size - 1, 1);
      rec.survivors = round_.group_world_size - 1;
      rec.wait = rc_.rejoin_timeout;
      rec.reason = rc_.host + " received " + signal + " and leaves the job";
      rdzv_->end_round(round_.round, rec);
      log_->warn("round {}: {}", round_.round, rec.reason);
    } catch (const Error& e) {
      log_->error("cannot tell the other nodes that this node leaves: {}", e.what());
    }
  }

  // Every node of the round waits until all have succeeded; the last one
  // ends the round as done and marks the job finished, so that spares and
  // late joiners exit too.
  int exit_barrier() {
    try {
      log_->info("all {} worker(s) succeeded; waiting for the other nodes", config_.nproc_per_node);
      const int64_t arrived = rdzv_->arrive_done(round_.round);
      if (arrived >= round_.group_world_size) {
        EndRecord rec;
        rec.kind = EndKind::kDone;
        rec.reason = "every worker succeeded";
        rdzv_->end_round(round_.round, rec);
        rdzv_->mark_job_finished(false, rec.reason);
      }
      auto e = rdzv_->wait_end(round_.round, config_.exit_barrier_timeout);
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
  void linger_while_store_in_use() {
    if (!rdzv_store_) return;
    heartbeat_.reset();
    rdzv_.reset();
    if (rdzv_store_->open_connections() > 0) {
      log_->info(
          "this node hosts the rendezvous store: serving it until the other {} "
          "connection(s) close",
          rdzv_store_->open_connections());
    }
    while (rdzv_store_->open_connections() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const AgentConfig& config_;
  const NodeContext& node_;
  rendezvous::RendezvousConfig rc_;
  std::unique_ptr<EmbeddedStore> rdzv_store_;
  std::unique_ptr<rendezvous::Heartbeat> heartbeat_;
  std::unique_ptr<rendezvous::Rendezvous> rdzv_;
  rendezvous::Assignment round_;
  AttemptResult last_failure_;  // this node's last failed attempt, for the report
  int last_rank_offset_ = 0;
  std::unique_ptr<EmbeddedStore> worker_store_, retired_store_;
  std::shared_ptr<spdlog::logger> log_ = util::logger("agent");
};

}  // namespace

bool is_local_address(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  if (host == name) return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  std::vector<std::string> wanted;
  bool local = false;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (is_loopback(ai->ai_addr)) local = true;
    wanted.push_back(numeric(ai->ai_addr, ai->ai_addrlen));
  }
  ::freeaddrinfo(res);
  if (local) return true;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return false;
  for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    const socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const std::string addr = numeric(i->ifa_addr, len);
    for (const auto& w : wanted) local = local || w == addr;
  }
  ::freeifaddrs(ifs);
  return local;
}

int run_dynamic(const AgentConfig& config, const NodeContext& node) {
  DynamicAgent agent(config, node);
  return agent.run();
}

}  // namespace elasticrun::agent
