#include "sim/simulator.hpp"

#include <algorithm>
#include <cassert>
#include <memory>
#include <utility>

#include "elasticrun/errors.hpp"
#include "sim/controller.hpp"
#include "sim/ledger.hpp"
#include "sim/nodes.hpp"
#include "sim/timers.hpp"

namespace elasticrun::sim {
namespace {

using elastic::Action;
using elastic::Decision;
using elastic::Observation;

// A decision loop that keeps ending rounds at one instant (zero costs and a
// controller that never settles) would never finish; no real one comes near.
constexpr int kMaxDecisionsAtOneTime = 10'000;

class Run {
 public:
  Run(const Trace& trace, std::string_view policy)
      : trace_(trace),
        ctl_(make_controller(policy, trace)),
        spares_(ctl_->holds_spares()),
        hears_(ctl_->hears_notices()),
        costs_(trace.recovery(policy)) {
    r_.policy = std::string(policy);
    r_.duration = trace.duration;
    r_.static_size = trace.start_size();
    r_.gpus_per_node = trace.gpus_per_node;
  }

  RunResult run(const std::vector<TimelineEvent>& timeline) {
    start();
    size_t next = 0;
    Millis end = trace_.duration;
    while (true) {
      const Millis event_at = next < timeline.size() ? timeline[next].at : trace_.duration;
      // Timers first at equal times: a round that is ready at t sees what
      // happens at t.
      const bool timer_first =
          !timers_.empty() && timers_.top().at <= event_at && timers_.top().at < trace_.duration;
      // A job whose work is done by then has ended: what comes next is not
      // its business.
      if (auto done = work_done_at();
          done && *done <= (timer_first ? timers_.top().at : event_at)) {
        end = *done;
        r_.time_to_train = end;
        break;
      }
      if (timer_first) {
        const Timer t = timers_.pop();
        advance(t.at);
        fire(t);
        sync_agents();
        mark();
        continue;
      }
      if (next == timeline.size()) break;
      advance(event_at);
      apply(timeline[next++]);
      sync_agents();
      mark();
    }
    advance(end);
    if (phase_ == Phase::kRunning) {
      // The end of the trace (or of the job) is the end of the measurement,
      // not a crash.
      ledger_.account_running(now_, size_, true);
    } else {
      ledger_.account_down(now_);
    }
    mark(true);
    ledger_.close();
    r_.duration = end;
    return std::move(r_);
  }

 private:
  enum class Phase {
    kRunning,     // training at size_
    kRestarting,  // a round of size_ closed; workers start and load until the Resume timer
    kWaiting,     // a round aiming at size_ waits for nodes (and maybe a deadline)
  };
  // A timer stamped with the round now (epoch_).
  void schedule(Millis at, TimerKind kind, int agents = 0, int members = 0) {
    timers_.schedule(at, kind, epoch_, agents, members);
  }

  int members() const { return phase_ == Phase::kWaiting ? 0 : size_; }

  // When the job will have done the trace's work if it trains on as it
  // does; nullopt without work, while it does not train, or past the end.
  std::optional<Millis> work_done_at() const {
    if (phase_ != Phase::kRunning) return std::nullopt;
    return ledger_.work_done_at(now_, size_);
  }

  // Integrates what depends on capacity alone up to `t`.
  void advance(Millis t) {
    assert(t >= now_);
    if (t > now_) {
      ledger_.elapse(t - now_, nodes_.capacity(), nodes_.noticed());
      decisions_now_ = 0;
    }
    now_ = t;
  }

  void start() {
    nodes_.start(std::max(agents_wanted(), r_.static_size));
    if (nodes_.capacity() >= r_.static_size) {
      phase_ = Phase::kRunning;
      size_ = r_.static_size;
      ledger_.running_from(now_, size_);
      observe();
    } else {
      begin_round(r_.static_size, now_, std::nullopt);
    }
    mark();
  }

  // Records the state after everything that happened at now_; always at
  // the end.
  void mark(bool always = false) {
    ledger_.mark(now_, nodes_.present(), phase_ == Phase::kRunning ? size_ : 0, always);
  }

  void fire(const Timer& t) {
    switch (t.kind) {
      case TimerKind::kResume:
        if (t.epoch == epoch_ && phase_ == Phase::kRestarting) resume();
        break;
      case TimerKind::kDeadline:
        if (t.epoch == epoch_) try_close();
        break;
      case TimerKind::kRecheck:
        if (phase_ != Phase::kWaiting) observe();
        break;
      case TimerKind::kNoticeEnds:
        notice_ends(t.agents, t.members);
        break;
      case TimerKind::kAgentsReady:
        if (nodes_.agents_up(t.agents) > 0) react(0, 0);
        break;
    }
  }

  void apply(const TimelineEvent& e) {
    if (e.kind == EventKind::kPreempt) return preempt(e.count);
    const int before = nodes_.capacity();
    const int held = members();
    nodes_.set_capacity(capacity_after(e, before, trace_));
    switch (e.kind) {
      case EventKind::kCapacity: {
        // Nodes taken back beyond the idle ones are the job's, with notice.
        const int gone = std::max(0, held - nodes_.present());
        nodes_changed(before, gone);
        react(0, gone);
        break;
      }
      case EventKind::kReplace:
        nodes_changed(before, 0);
        react(0, 0);
        break;
      case EventKind::kFail:
      case EventKind::kSpotNotice: {
        const bool notice = e.kind == EventKind::kSpotNotice;
        // The members this event can hit: those on available nodes (not
        // noticed ones), and for a notice those on spot nodes, which
        // members take only once the on-demand ones are taken.
        const int live = held - std::min(held, nodes_.doomed_members());
        const int pool = notice ? trace_.fleet.spot(before) : before;
        const int exposed = notice ? std::max(0, live - trace_.fleet.on_demand(before)) : live;
        const int hit = e.pick ? (*e.pick * pool < exposed ? 1 : 0)
                               : std::min(before - nodes_.capacity(), exposed);
        if (notice && trace_.notice_time() > Millis(0)) {
          const int noticed = before - nodes_.capacity();
          // A job that does not hear it trains on, on every node, until they go.
          assert(hears_ || spares_);
          nodes_.notice(noticed, !hears_, hit);
          schedule(now_ + trace_.notice_time(), TimerKind::kNoticeEnds, noticed, hears_ ? 0 : hit);
          if (!hears_) break;
        }
        nodes_changed(before, hit);
        if (notice) {
          react(0, hit);
        } else {
          r_.members_lost += hit;
          react(hit, 0);
        }
        break;
      }
      case EventKind::kScale:
        if (phase_ == Phase::kWaiting) {
          pending_scale_ = e.count;
        } else {
          observe(0, 0, 0, e.count);
        }
        break;
      case EventKind::kPreempt:
        break;
    }
  }

  // Noticed nodes go: billing stops, and members a job that did not hear
  // the notice still held are lost (it trained on them until now).
  void notice_ends(int nodes, int members_on_them) {
    nodes_.gone(nodes, !hears_, members_on_them);
    if (hears_) return;
    // The members noticed on them, or more: a round that closed since the
    // notice (the job restarts at every change) may have put members on
    // nodes that were idle then, and the members left cannot outnumber the
    // nodes left.
    const int lost =
        std::min({members(), nodes, std::max(members_on_them, members() - nodes_.present())});
    nodes_changed(nodes_.capacity(), lost);
    r_.members_lost += lost;
    react(lost, 0);
  }

  void react(int lost, int leaving) {
    if (phase_ == Phase::kWaiting) {
      try_close();
    } else {
      observe(lost, leaving);
    }
  }

  // An operator releases `k` nodes for a higher-priority job: the job's
  // controller hears the request first; then that job takes k nodes, idle
  // ones first (those the decision freed included), and running members
  // only when too few are idle: those leave by force.
  // A job waiting for nodes holds none: the other job takes idle ones and
  // the request is not counted.
  void preempt(int k) {
    const bool holding = phase_ != Phase::kWaiting;
    if (holding) {
      ++r_.preempt_requests;
      observe(0, 0, k);
    }
    const int idle = nodes_.present() - members();
    const int forced = std::max(0, std::min(k, nodes_.capacity()) - idle);
    const int before = nodes_.capacity();
    nodes_.set_capacity(std::max(0, before - k));
    nodes_changed(before, forced);
    if (holding && forced == 0) ++r_.preempt_answered_in_one_decision;
    react(0, forced);
  }

  Decision observe(int lost = 0, int leaving = 0, int release = 0,
                   std::optional<int> scale = std::nullopt) {
    assert(phase_ != Phase::kWaiting);
    if (++decisions_now_ > kMaxDecisionsAtOneTime) {
      throw Error("simulation of " + r_.policy + " makes no progress at " + short_duration(now_) +
                  ": every decision ends the round again");
    }
    Observation o;
    o.now = now_;
    o.current = size_;
    o.lost = lost;
    o.leaving = leaving;
    o.waiting = nodes_.agents() - (size_ - lost - leaving);
    o.release_request = release;
    o.scale_request = scale ? scale : std::exchange(pending_scale_, std::nullopt);
    assert(o.waiting >= 0);
    ++r_.decisions;
    Decision d = ctl_->decide(o);
    if (d.recheck_at && *d.recheck_at > now_) timers_.recheck(*d.recheck_at, epoch_);
    if (d.action != Action::kNone) end_round(d, lost > 0);
    return d;
  }

  void end_round(const Decision& d, bool failure) {
    // A failure loses the work since the last checkpoint; so does a stop by
    // a controller whose workers do not save on the way out.
    const bool saved = !failure && ctl_->saves_on_stop();
    Millis save_done = now_;
    if (phase_ == Phase::kRunning) {
      ledger_.account_running(now_, size_, saved);
      if (saved) save_done += costs_.stop_save;
    } else {
      // Workers still starting have nothing new to save or lose.
      ledger_.account_down(now_);
    }
    ++r_.restarts;
    std::optional<Millis> deadline;
    if (d.wait_for_replacements < trace_.duration - now_) deadline = now_ + d.wait_for_replacements;
    begin_round(d.target, save_done, deadline);
  }

  void begin_round(int target, Millis save_done, std::optional<Millis> deadline) {
    phase_ = Phase::kWaiting;
    // The stretch before it was accounted as the last round ended.
    assert(ledger_.since() == now_);
    size_ = target;
    save_done_ = save_done;
    deadline_ = deadline;
    ++epoch_;
    if (deadline_ && *deadline_ > now_) schedule(*deadline_, TimerKind::kDeadline);
    try_close();
  }

  // The waiting round closes at its target once the nodes are there, or
  // after its deadline at the largest size the nodes there allow.
  void try_close() {
    if (phase_ != Phase::kWaiting) return;
    std::optional<int> n;
    if (nodes_.agents() >= size_) {
      n = size_;
    } else if (deadline_ && now_ >= *deadline_) {
      n = ctl_->largest_size_at_most(nodes_.agents());
    }
    if (!n) return;
    ledger_.account_down(now_);
    phase_ = Phase::kRestarting;
    size_ = *n;
    ++epoch_;
    // Rendezvous and process start follow the save; the load follows them.
    schedule(std::max(now_, save_done_) + costs_.restart + costs_.checkpoint_load,
             TimerKind::kResume);
  }

  void resume() {
    ledger_.account_down(now_);
    phase_ = Phase::kRunning;
    ledger_.running_from(now_, size_);
    // The new round's first observation.
    observe();
  }

  // Keeps the agents in step after the capacity went from `before` and
  // `gone` members were lost or are leaving (Nodes::changed).
  void nodes_changed(int before, int gone) { nodes_.changed(before, gone, agents_wanted()); }

  // Without spares: the agents the job keeps, members included: enough for
  // the largest size the controller allows within the capacity, or for the
  // target of the round it waits to close, never more than the nodes there.
  int agents_wanted() const {
    const int usable = std::min(nodes_.capacity(), trace_.policy.max_replicas);
    int want = ctl_->largest_size_at_most(usable).value_or(0);
    if (phase_ == Phase::kWaiting) want = std::max(want, size_);
    return std::min(want, nodes_.capacity());
  }

  // Without spares, after everything that happened at now_: idle agents the
  // job cannot use are stopped, and agents it is short of are started on
  // idle nodes; they are up node_start later.
  void sync_agents() {
    if (const int started = nodes_.sync(members(), agents_wanted()); started > 0) {
      schedule(now_ + trace_.node_start, TimerKind::kAgentsReady, started);
    }
  }

  const Trace& trace_;
  std::unique_ptr<Controller> ctl_;
  const bool spares_;
  const bool hears_;  // spot notices, when they come
  const RecoveryCosts costs_;
  RunResult r_;
  Ledger ledger_{trace_, r_};
  Nodes nodes_{trace_.initial_capacity, spares_};

  Millis now_{0};
  Phase phase_ = Phase::kRunning;
  int size_ = 0;
  Millis save_done_{0};
  std::optional<Millis> deadline_;
  uint64_t epoch_ = 0;
  std::optional<int> pending_scale_;  // a scale request that came while no round ran
  int decisions_now_ = 0;
  TimerQueue timers_{trace_.duration};
};

}  // namespace

RunResult simulate(const Trace& trace, const std::vector<TimelineEvent>& timeline,
                   std::string_view policy) {
  return Run(trace, policy).run(timeline);
}

std::vector<RunResult> compare(const Trace& trace, uint64_t seed,
                               const std::vector<std::string>& policies) {
  const std::vector<TimelineEvent> timeline = expand(trace, seed);
  std::vector<RunResult> runs;
  for (const std::string& p : policies) runs.push_back(simulate(trace, timeline, p));
  return runs;
}

}  // namespace elasticrun::sim
