#include "agent/dynamic_agent.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "agent/embedded_store.hpp"
#include "agent/failure_report.hpp"
#include "control/control_block.hpp"
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

control::EventKind event_kind(EndKind k) {
  switch (k) {
    case EndKind::kScaleUp:
      return control::EventKind::scale_up;
    case EndKind::kScaleDown:
      return control::EventKind::scale_down;
    case EndKind::kReplace:
      return control::EventKind::replace;
    case EndKind::kRestart:
      return control::EventKind::restart;
    case EndKind::kFail:
    case EndKind::kDone:
      return control::EventKind::shutdown;
  }
  return control::EventKind::shutdown;
}

// Voluntary events leave every member alive and its collectives working:
// the workers can all stop at one agreed step and checkpoint. After a loss
// or a failure the collectives are broken and there is no such step.
bool voluntary(EndKind k) {
  return k == EndKind::kScaleUp || k == EndKind::kScaleDown;
}

// The least time after a failure before workers that can save a rescue get
// --shutdown-signal (DynamicAgent::rescue_window).
constexpr std::chrono::milliseconds kMinRescueWindow{1000};

// The control block lives in tmpfs when there is one: workers map it.
std::string control_path(const std::filesystem::path& run_dir) {
  std::random_device rd;
  const std::string name =
      "elasticrun-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000) + ".ctl";
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm/" + name;
  return (run_dir / name).string();
}

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

  ~DynamicAgent() {
    if (control_) (void)control_->unlink();
  }

  int run() {
    auto cb = control::ControlBlock::create(control_path(node_.run_dir), config_.nproc_per_node);
    if (cb) {
      control_ = std::make_unique<control::ControlBlock>(std::move(cb).value());
      node_.base["ELASTICRUN_CONTROL_FILE"] = control_->path();
    } else {
      log_->warn("{}; workers will not see scale events in advance (SIGTERM only)",
                 cb.status().message());
    }
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
    // --warm-start: offer this node only once its workers can start at
    // once; a running job then stops for it for a moment, not for an
    // interpreter's start and `import torch`.
    if (node_.warm && node_.warm->idle() > 0) {
      const auto t0 = std::chrono::steady_clock::now();
      log_->info("waiting for {} warm interpreter(s) to finish their imports before joining",
                 node_.warm->idle());
      const size_t ready = node_.warm->wait_ready(std::chrono::seconds(120));
      log_->info("{} warm interpreter(s) ready after {} ms", ready,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
    }
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
      if (control_) {
        std::lock_guard lock(control_mu_);
        control_->reset(round_.round);
        agreed_stop_ = -1;
      }
      sample_step_ = -1;
      steps_per_s_ = 0;
      EndBox end;
      StopChannel stop;
      rendezvous::WatchOptions wo;
      wo.assignment = round_;
      wo.policy = config_.policy;
      wo.on_end = [&](const EndRecord& r, rendezvous::Rendezvous& watch_rdzv) {
        end.set(r);
        stop.post(describe(r));
        if (voluntary(r.kind)) agree_stop_step(watch_rdzv);
      };
      wo.on_tick = [&] { sample_progress(); };
      auto watch = std::make_unique<rendezvous::RoundWatch>(rc_, wo);
      AttemptHooks hooks;
      hooks.stop = &stop;
      hooks.on_failure = [&](const supervisor::WorkerExit& e) { on_local_failure(e.describe()); };
      hooks.on_signal = [&](int sig) { on_leave(supervisor::signal_name(sig)); };
      hooks.signal_means_leave = true;
      hooks.tell_stop = [&](supervisor::WorkerGroup& g) { return tell_stop(g, end.get()); };
      hooks.rescue = [&](int local_rank) { return rescue_state(local_rank); };
      hooks.rescue_window = [&] { return rescue_window(); };
      AttemptResult r = run_attempt(config_, node_, a, attempt, hooks);

      // Signaled, or stopped with the others after a signal: this node leaves.
      if (r.outcome == Outcome::kSignaled || r.stop_signal != 0) return 128 + r.stop_signal;
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

  // The round ended: workers that attached the SDK learn it from the control
  // block and SIGUSR1 and stop at the agreed step (it follows shortly);
  // the others get --shutdown-signal, as under torchrun, and resume from
  // their own checkpoint in the next round. False when the round ended by a
  // failure or a loss: there is no agreed step, and the attempt stops the
  // workers as after a failure (rescue_state, rescue_window).
  bool tell_stop(supervisor::WorkerGroup& g, const std::optional<EndRecord>& e) {
    const bool graceful = control_ && e && voluntary(e->kind);
    if (control_ && e) {
      control::ControlBlock::Event ev;
      ev.generation = round_.round;
      ev.kind = event_kind(e->kind);
      ev.next_world_size = e->target > 0 ? e->target * config_.nproc_per_node : -1;
      ev.deadline_unix_ms = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(
              (std::chrono::system_clock::now() + config_.graceful_shutdown_timeout)
                  .time_since_epoch())
              .count());
      ev.reason = e->reason;
      std::lock_guard lock(control_mu_);
      // The watch thread may have agreed on the stop step already.
      ev.stop_step = agreed_stop_;
      control_->publish_event(ev);
    }
    if (!graceful) return false;
    int told = 0;
    for (int lr = 0; lr < static_cast<int>(g.size()); ++lr) {
      if (control_->attached(lr)) {
        g.signal_one(lr, SIGUSR1);
        ++told;
      } else {
        // Its process group: whatever the worker forked goes with it.
        ::kill(-g.pid(lr), config_.shutdown_signal);
      }
    }
    if (told > 0) {
      log_->info("{} worker(s) told to checkpoint and stop (SIGUSR1, control block)", told);
    }
    return true;
  }

  // Workers that attached the SDK can save a rescue after a failure; one that
  // marked itself stopped (checkpointing) is saving it.
  Rescue rescue_state(int local_rank) const {
    if (!control_) return Rescue::kNone;
    const uint32_t flags = control_->read_slot(local_rank).flags;
    if ((flags & control::kFlagAttached) == 0) return Rescue::kNone;
    return (flags & control::kFlagStopped) != 0 ? Rescue::kUnderWay : Rescue::kPossible;
  }

  // Long enough for a survivor to reach its next collective, find it broken
  // and begin its rescue: two steps at the rate this node's workers stepped,
  // at least kMinRescueWindow, at most --graceful-shutdown-timeout.
  std::chrono::milliseconds rescue_window() const {
    const double rate = steps_per_s_.load();
    auto window = kMinRescueWindow;
    if (rate > 0) {
      window = std::max(window, std::chrono::milliseconds(static_cast<int64_t>(2000.0 / rate)));
    }
    return std::min(window, config_.graceful_shutdown_timeout);
  }

  // Watch thread: agree with the other members on the step every worker
  // stops at, and publish it in the control block.
  void agree_stop_step(rendezvous::Rendezvous& r) {
    if (!control_) return;
    try {
      const auto stop =
          r.agree_stop_step(round_.round, round_.group_world_size, control_->max_step(),
                            steps_per_s_, std::chrono::milliseconds(250), rc_.rejoin_timeout);
      if (!stop) {
        log_->warn(
            "round {}: no agreed stop step (a member did not answer); workers are "
            "stopped at the graceful shutdown timeout",
            round_.round);
        return;
      }
      std::lock_guard lock(control_mu_);
      agreed_stop_ = *stop;
      control_->set_stop_step(*stop);
      log_->info("round {}: every worker stops at step {}", round_.round, *stop);
    } catch (const Error& e) {
      log_->warn("round {}: agreeing on the stop step failed: {}", round_.round, e.what());
    }
  }

  // Watch thread, once per heartbeat: how fast do this node's workers step?
  void sample_progress() {
    if (!control_) return;
    const int64_t step = control_->max_step();
    const auto now = std::chrono::steady_clock::now();
    if (sample_step_ >= 0 && step > sample_step_) {
      const double dt = std::chrono::duration<double>(now - sample_time_).count();
      if (dt > 0) steps_per_s_ = static_cast<double>(step - sample_step_) / dt;
    }
    sample_step_ = step;
    sample_time_ = now;
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
  NodeContext node_;  // a copy: the workers' environment gains the control file
  std::unique_ptr<control::ControlBlock> control_;
  std::mutex control_mu_;     // the header has one writer at a time: loop or watch thread
  int64_t agreed_stop_ = -1;  // this round's stop step, once agreed (under control_mu_)
  // Progress samples (watch thread): the step rate the stop step must outrun.
  int64_t sample_step_ = -1;
  std::chrono::steady_clock::time_point sample_time_;
  std::atomic<double> steps_per_s_{0};  // read on the attempt's loop too
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
