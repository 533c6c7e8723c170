#include "agent/round.hpp"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "elastic/policy.hpp"
#include "elasticrun/errors.hpp"
#include "events/types.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

using rendezvous::EndKind;
using rendezvous::EndRecord;

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
// --shutdown-signal (Round::rescue_window).
constexpr std::chrono::milliseconds kMinRescueWindow{1000};
// How far ahead of the fastest rank the agreed stop step must be when the
// workers read it (Rendezvous::agree_stop_step).
constexpr std::chrono::milliseconds kStopStepLead{250};

}  // namespace

std::string describe(const EndRecord& r) {
  std::string s = std::string("the round ended (") + rendezvous::to_string(r.kind) + ")";
  if (!r.reason.empty()) s += ": " + r.reason;
  return s;
}

Round::Round(const AgentConfig& config, const rendezvous::RendezvousConfig& rc,
             const rendezvous::Assignment& place, control::ControlBlock* control, Courier& courier,
             rendezvous::BeatProgress& beat, GpuWatch* gpu, serve::AgentMetrics* metrics)
    : MonitoredRound(config, control, gpu, *rc.events, metrics),
      config_(config),
      rc_(rc),
      place_(place),
      control_(control),
      courier_(courier),
      beat_(beat) {
  rendezvous::WatchOptions wo;
  wo.assignment = place_;
  wo.policy = config_.policy;
  watch_ = std::make_unique<rendezvous::RoundWatch>(rc_, wo, *this);
}

// The watch goes first (the member order says so): it may be posting.
Round::~Round() = default;

void Round::round_ended(const EndRecord& record) {
  inbox_->post([this, record](AttemptControl& c) { ended(record, c); });
}

void Round::ended(const EndRecord& record, AttemptControl& control) {
  if (end_) return;
  end_ = record;
  if (voluntary(record.kind) && control_) {
    // Every member posts its node's highest step and rate; the last sets
    // the stop step. The answer comes back as a message.
    const uint64_t round = place_.round;
    const int members = place_.group_world_size;
    const int64_t max_step = control_->max_step();
    const double rate = rate_.per_second();
    const auto budget = rc_.rejoin_timeout;
    courier_.post([this, inbox = inbox_, round, members, max_step, rate,
                   budget](rendezvous::Rendezvous& r) {
      auto log = util::logger("agent");
      try {
        const auto stop = r.agree_stop_step(round, members, max_step, rate, kStopStepLead, budget);
        if (!stop) {
          log->warn(
              "round {}: no agreed stop step (a member did not answer); workers are "
              "stopped at the graceful shutdown timeout",
              round);
          return;
        }
        inbox->post([this, step = *stop](AttemptControl&) { stop_step_agreed(step); });
      } catch (const Error& e) {
        log->warn("round {}: agreeing on the stop step failed: {}", round, e.what());
      }
    });
  }
  control.request_stop(describe(record));
}

void Round::stop_step_agreed(int64_t step) {
  agreed_stop_ = step;
  if (control_) control_->set_stop_step(step);
  util::logger("agent")->info("round {}: every worker stops at step {}", place_.round, step);
}

// The round ended: workers that attached the SDK learn it from the control
// block and SIGUSR1 and stop at the agreed step (it follows shortly); the
// others get --shutdown-signal, as under torchrun, and resume from their
// own checkpoint in the next round. False when the round ended by a
// failure or a loss: there is no agreed step, and the attempt stops the
// workers as after a failure (rescue, rescue_window).
bool Round::tell_stop(supervisor::WorkerGroup& g) {
  const bool graceful = control_ && end_ && voluntary(end_->kind);
  if (control_ && end_) {
    control::ControlBlock::Event ev;
    ev.generation = place_.round;
    ev.kind = event_kind(end_->kind);
    ev.next_world_size = end_->target > 0 ? end_->target * config_.nproc_per_node : -1;
    ev.deadline_unix_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            (std::chrono::system_clock::now() + config_.graceful_shutdown_timeout)
                .time_since_epoch())
            .count());
    ev.reason = end_->reason;
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
      g.signal_group(lr, config_.shutdown_signal);
    }
  }
  if (told > 0) {
    util::logger("agent")->info("{} worker(s) told to checkpoint and stop (SIGUSR1, control block)",
                                told);
  }
  return true;
}

// Workers that attached the SDK can save a rescue after a failure; one that
// marked itself stopped (checkpointing) is saving it.
Rescue Round::rescue(int local_rank) {
  if (!control_) return Rescue::kNone;
  const uint32_t flags = control_->read_slot(local_rank).flags;
  if ((flags & control::kFlagAttached) == 0) return Rescue::kNone;
  return (flags & control::kFlagStopped) != 0 ? Rescue::kUnderWay : Rescue::kPossible;
}

// Long enough for a survivor to reach its next collective, find it broken
// and begin its rescue: two steps at the rate this node's workers stepped,
// at least kMinRescueWindow, at most --graceful-shutdown-timeout.
std::chrono::milliseconds Round::rescue_window() {
  const double rate = rate_.per_second();
  auto window = kMinRescueWindow;
  if (rate > 0) {
    window = std::max(window, std::chrono::milliseconds(static_cast<int64_t>(2000.0 / rate)));
  }
  return std::min(window, config_.graceful_shutdown_timeout);
}

void Round::tick(std::chrono::steady_clock::time_point now) {
  if (control_) {
    const int64_t step = control_->max_step();
    rate_.sample(now, step);
    // The slowest rank's last compute time is the node's (the others wait
    // for it at every all-reduce): the straggler monitor compares it.
    uint32_t compute = 0;
    std::vector<int64_t> steps;
    std::optional<double> samples;
    for (int lr = 0; lr < control_->num_slots(); ++lr) {
      const auto slot = control_->read_slot(lr);
      compute = std::max(compute, slot.compute_us);
      steps.push_back(slot.step);
      if (std::isfinite(slot.tokens_per_s)) samples = samples.value_or(0) + slot.tokens_per_s;
    }
    beat_.step.store(step, std::memory_order_relaxed);
    beat_.compute_us.store(compute, std::memory_order_relaxed);
    beat_.set_ranks(std::move(steps), samples);
  }
  MonitoredRound::tick(now);
}

// Ends the round for everyone (unless someone else did first), on the courier.
void Round::end_round(EndRecord record, std::string log_line, std::string blame, bool exclude_now) {
  courier_.post([round = place_.round, record = std::move(record), log_line = std::move(log_line),
                 blame = std::move(blame), exclude_now, host = rc_.host, policy = rc_.exclusion,
                 events = rc_.events](rendezvous::Rendezvous& r) {
    auto log = util::logger("agent");
    try {
      const EndRecord now = r.end_round(round, record);
      if (now.serialize() != record.serialize()) return;
      log->warn("round {}: {}", round, log_line);
      // Only the node whose record ended the round is blamed: the others'
      // workers failed in their collectives because of it.
      if (blame.empty()) return;
      bool excluded = false;
      r.update_exclusions([&](health::ExclusionState& s) {
        if (exclude_now) {
          s.exclude(host, rendezvous::now_unix_ms(), policy, blame);
          excluded = true;
        } else {
          excluded = s.record_fault(host, rendezvous::now_unix_ms(), policy, blame);
        }
        return true;
      });
      if (excluded) {
        log->warn("this node ({}) is excluded from the job for a cooldown: {}", host, blame);
        events->record(events::type::kNodeExcluded,
                       {{"round", round}, {"node_host", host}, {"reason", blame}});
      }
    } catch (const Error& e) {
      log->error("cannot tell the other nodes that {}: {}", log_line, e.what());
    }
  });
}

// A worker of this node failed: end the round for everyone at once. The
// next round's closer decides whether it costs a restart (it does not when
// a member was lost: the lost node's peers fail in their collectives before
// anyone can tell) and fails the job when --max-restarts is spent.
void Round::on_failure(const supervisor::WorkerExit& exit) {
  fail(exit.describe());
}

// This node's survivors learn of the failure at once from the block (their
// SDK releases their collectives); the other nodes' from the end record.
void Round::publish_failure(const std::string& reason) {
  if (!control_) return;
  control::ControlBlock::Event ev;
  ev.generation = place_.round;
  ev.kind = control::EventKind::restart;
  ev.reason = reason;
  control_->publish_event(ev);
}

// A failure of this node's: every member expected back, as it was.
EndRecord Round::restart_record(std::string reason) const {
  EndRecord rec;
  rec.kind = EndKind::kRestart;
  rec.target = place_.group_world_size;
  rec.survivors = place_.group_world_size;
  rec.wait = rc_.rejoin_timeout;
  rec.reason = std::move(reason);
  return rec;
}

void Round::on_fault(const health::Fault& fault) {
  const EndRecord rec = restart_record("a health fault on " + rc_.host + ": " + fault.describe());
  publish_failure(rec.reason);
  // A GPU error is the machine's, not the job's: the node goes at once.
  end_round(rec, rec.reason + "; ending the round", fault.describe(),
            fault.kind == health::FaultKind::kGpu);
}

void Round::fail(const std::string& what) {
  const EndRecord rec = restart_record("a worker on " + rc_.host + " failed (" + what + ")");
  publish_failure(rec.reason);
  end_round(rec, rec.reason + "; ending the round", what);
}

// A handled signal reached the agent: this node is going away (a spot
// notice, a preemption). The others continue without it.
bool Round::on_signal(int signo) {
  rc_.events->record(events::type::kLeave,
                     {{"round", place_.round}, {"signal", supervisor::signal_name(signo)}});
  courier_.post([round = place_.round, members = place_.group_world_size, rc = rc_,
                 policy = config_.policy,
                 signal = supervisor::signal_name(signo)](rendezvous::Rendezvous& r) {
    try {
      r.announce_leaving(round);
      elastic::Policy p(policy);
      elastic::Observation o;
      o.current = members;
      o.waiting = r.waiting_after(round);
      o.leaving = 1;
      const elastic::Decision d = p.decide(o);
      EndRecord rec;
      rec.kind = EndKind::kScaleDown;
      rec.target = d.target > 0 ? d.target : std::max(members - 1, 1);
      rec.survivors = members - 1;
      rec.wait = rc.rejoin_timeout;
      rec.reason = rc.host + " received " + signal + " and leaves the job";
      r.end_round(round, rec);
      util::logger("agent")->warn("round {}: {}", round, rec.reason);
    } catch (const Error& e) {
      util::logger("agent")->error("cannot tell the other nodes that this node leaves: {}",
                                   e.what());
    }
  });
  return true;
}

}  // namespace elasticrun::agent
