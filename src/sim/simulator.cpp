#include "sim/simulator.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <memory>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

#include "elasticrun/errors.hpp"
#include "sim/controller.hpp"
#include "sim/stretch.hpp"

namespace elasticrun::sim {
namespace {

using elastic::Action;
using elastic::Decision;
using elastic::Observation;

double hours(Millis d) {
  return static_cast<double>(d.count()) / 3600e3;
}

double seconds(Millis d) {
  return static_cast<double>(d.count()) / 1e3;
}

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
    capacity_ = trace.initial_capacity;
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
        const Timer t = timers_.top();
        timers_.pop();
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
      account_running(true);
    } else {
      account_down();
    }
    mark(true);
    r_.down = r_.time_at_size[0];
    r_.duration = end;
    r_.cost = trace_.fleet.cost(r_.spot_node_hours, r_.on_demand_node_hours);
    return std::move(r_);
  }

 private:
  enum class Phase {
    kRunning,     // training at size_
    kRestarting,  // a round of size_ closed; workers start and load until the Resume timer
    kWaiting,     // a round aiming at size_ waits for nodes (and maybe a deadline)
  };
  enum class TimerKind { kResume, kDeadline, kRecheck, kAgentsReady, kNoticeEnds };
  struct Timer {
    Millis at;
    uint64_t seq;
    TimerKind kind;
    uint64_t epoch;  // kResume/kDeadline: stale when the round changed since
    // kAgentsReady: how many were started; kNoticeEnds: the nodes going.
    int agents;
    int members;  // kNoticeEnds: of those, members the job did not hear leave
    // Agents that come up when a round's wait for replacements ends are in
    // time for it.
    int rank() const { return kind == TimerKind::kAgentsReady ? 0 : 1; }
    bool operator>(const Timer& o) const {
      return std::tuple(at, rank(), seq) > std::tuple(o.at, o.rank(), o.seq);
    }
  };

  void schedule(Millis at, TimerKind kind, int agents = 0, int members = 0) {
    if (at >= trace_.duration) return;
    timers_.push({at, next_seq_++, kind, epoch_, agents, members});
  }

  int members() const { return phase_ == Phase::kWaiting ? 0 : size_; }

  // Nodes there: the capacity, and noticed nodes that a job that does not
  // hear notices still trains on.
  int present() const { return capacity_ + doomed_; }

  // When the job will have done the trace's work if it trains on as it
  // does; nullopt without work, while it does not train, or past the end.
  std::optional<Millis> work_done_at() const {
    if (!trace_.work || phase_ != Phase::kRunning) return std::nullopt;
    const double rate = trace_.throughput.at(size_);
    if (rate <= 0) return std::nullopt;
    const double left_ms = std::max(0.0, (*trace_.work - r_.tokens) / rate * 1e3);
    if (left_ms > static_cast<double>(trace_.duration.count())) return std::nullopt;
    const Millis trained(static_cast<int64_t>(std::ceil(left_ms)));
    return std::max(now_, phase_since_ + length_to_train(trace_, trained));
  }

  // Integrates what depends on capacity alone up to `t`.
  void advance(Millis t) {
    assert(t >= now_);
    if (t > now_) {
      const Millis dt = t - now_;
      const int usable = std::min(capacity_, trace_.policy.max_replicas);
      const int ideal = elastic::largest_allowed_at_most(trace_.policy, usable).value_or(0);
      r_.ideal_tokens += seconds(dt) * trace_.throughput.at(ideal);
      r_.idle_node_hours += hours(dt) * std::max(0, usable - r_.static_size);
      r_.spot_node_hours += hours(dt) * (trace_.fleet.spot(capacity_) + noticed_);
      r_.on_demand_node_hours += hours(dt) * trace_.fleet.on_demand(capacity_);
      decisions_now_ = 0;
    }
    now_ = t;
  }

  void start() {
    agents_ = spares_ ? capacity_ : std::min(capacity_, std::max(agents_wanted(), r_.static_size));
    if (capacity_ >= r_.static_size) {
      phase_ = Phase::kRunning;
      size_ = r_.static_size;
      last_running_size_ = size_;
      series_.stretch_started();
      observe();
    } else {
      begin_round(r_.static_size, now_, std::nullopt);
    }
    mark();
  }

  // Records the state after everything that happened at now_; always at
  // the end.
  void mark(bool always = false) {
    series_.mark({now_, present(), phase_ == Phase::kRunning ? size_ : 0, r_.useful, r_.tokens},
                 always);
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
        rechecks_.erase(t.at);
        if (phase_ != Phase::kWaiting) observe();
        break;
      case TimerKind::kNoticeEnds:
        notice_ends(t.agents, t.members);
        break;
      case TimerKind::kAgentsReady: {
        // Starts cancelled since (sync_agents) are taken off the latest.
        const int up = std::min({t.agents, starting_, capacity_ - agents_});
        starting_ -= std::min(t.agents, starting_);
        if (up > 0) {
          agents_ += up;
          react(0, 0);
        }
        break;
      }
    }
  }

  void apply(const TimelineEvent& e) {
    if (e.kind == EventKind::kPreempt) return preempt(e.count);
    const int before = capacity_;
    const int held = members();
    capacity_ = capacity_after(e, capacity_, trace_);
    switch (e.kind) {
      case EventKind::kCapacity: {
        // Nodes taken back beyond the idle ones are the job's, with notice.
        const int gone = std::max(0, held - present());
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
        const int live = held - std::min(held, doomed_members_);
        const int pool = notice ? trace_.fleet.spot(before) : before;
        const int exposed = notice ? std::max(0, live - trace_.fleet.on_demand(before)) : live;
        const int hit =
            e.pick ? (*e.pick * pool < exposed ? 1 : 0) : std::min(before - capacity_, exposed);
        if (notice && trace_.notice_time() > Millis(0)) {
          const int noticed = before - capacity_;
          noticed_ += noticed;
          if (!hears_) {
            // The job trains on, on every node, until they go.
            assert(spares_);
            doomed_ += noticed;
            doomed_members_ += hit;
          }
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
    noticed_ -= nodes;
    if (hears_) return;
    doomed_ -= nodes;
    doomed_members_ -= members_on_them;
    // The members noticed on them, or more: a round that closed since the
    // notice (the job restarts at every change) may have put members on
    // nodes that were idle then, and the members left cannot outnumber the
    // nodes left.
    const int lost = std::min({members(), nodes, std::max(members_on_them, members() - present())});
    nodes_changed(capacity_, lost);
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
    const int idle = present() - members();
    const int forced = std::max(0, std::min(k, capacity_) - idle);
    const int before = capacity_;
    capacity_ = std::max(0, capacity_ - k);
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
    o.waiting = agents_ - (size_ - lost - leaving);
    o.release_request = release;
    o.scale_request = scale ? scale : std::exchange(pending_scale_, std::nullopt);
    assert(o.waiting >= 0);
    ++r_.decisions;
    Decision d = ctl_->decide(o);
    if (d.recheck_at && *d.recheck_at > now_ && rechecks_.insert(*d.recheck_at).second) {
      schedule(*d.recheck_at, TimerKind::kRecheck);
    }
    if (d.action != Action::kNone) end_round(d, lost > 0);
    return d;
  }

  void end_round(const Decision& d, bool failure) {
    // A failure loses the work since the last checkpoint; so does a stop by
    // a controller whose workers do not save on the way out.
    const bool saved = !failure && ctl_->saves_on_stop();
    Millis save_done = now_;
    if (phase_ == Phase::kRunning) {
      account_running(saved);
      if (saved) save_done += costs_.stop_save;
    } else {
      // Workers still starting have nothing new to save or lose.
      account_down();
    }
    ++r_.restarts;
    std::optional<Millis> deadline;
    if (d.wait_for_replacements < trace_.duration - now_) deadline = now_ + d.wait_for_replacements;
    begin_round(d.target, save_done, deadline);
  }

  void begin_round(int target, Millis save_done, std::optional<Millis> deadline) {
    phase_ = Phase::kWaiting;
    phase_since_ = now_;
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
    if (agents_ >= size_) {
      n = size_;
    } else if (deadline_ && now_ >= *deadline_) {
      n = ctl_->largest_size_at_most(agents_);
    }
    if (!n) return;
    account_down();
    phase_ = Phase::kRestarting;
    size_ = *n;
    ++epoch_;
    // Rendezvous and process start follow the save; the load follows them.
    schedule(std::max(now_, save_done_) + costs_.restart + costs_.checkpoint_load,
             TimerKind::kResume);
  }

  void resume() {
    account_down();
    phase_ = Phase::kRunning;
    if (last_running_size_ && size_ != *last_running_size_) {
      const int direction = size_ > *last_running_size_ ? 1 : -1;
      ++r_.scale_events;
      ++(direction > 0 ? r_.scale_ups : r_.scale_downs);
      if (last_scale_ && last_scale_->second == -direction &&
          now_ - last_scale_->first < trace_.policy.min_stable_period) {
        ++r_.thrash_events;
      }
      last_scale_ = {now_, direction};
    }
    last_running_size_ = size_;
    series_.stretch_started();
    // The new round's first observation.
    observe();
  }

  // Ends a stretch of training at size_ from phase_since_ to now. With
  // periodic checkpoints the stretch is cycles of checkpoint_every training
  // then checkpoint_save saving, starting from the checkpoint just loaded;
  // `saved`: everything trained counts, else only what the last completed
  // checkpoint holds.
  void account_running(bool saved) {
    const Millis length = now_ - phase_since_;
    const Stretch s = stretch(trace_, length);
    const Millis kept = saved ? s.trained : s.durable;
    const double rate = trace_.throughput.at(size_);
    series_.stretch_ended(trace_, phase_since_, s, kept, rate, size_, r_.useful, r_.tokens);
    r_.useful += kept;
    r_.lost_work += s.trained - kept;
    r_.checkpointing += s.checkpointing;
    r_.tokens += seconds(kept) * rate;
    r_.absorbed_node_hours += hours(length) * std::max(0, size_ - r_.static_size);
    r_.time_at_size[size_] += length;
    phase_since_ = now_;
  }

  // Keeps agents_ in step after the capacity went from `before` to
  // capacity_ and `gone` members were lost or are leaving. With spares every
  // available node runs an agent. Without, nodes the trace adds come with
  // an agent while the job can use them (starting those is the trace's
  // business); nodes taken away are agent-less idle ones first.
  void nodes_changed(int before, int gone) {
    if (spares_) {
      agents_ = present();
    } else if (capacity_ > before) {
      agents_ += std::min(capacity_ - before, std::max(0, agents_wanted() - agents_));
    } else {
      agents_ = std::min(agents_ - gone, capacity_);
    }
  }

  // Without spares: the agents the job keeps, members included: enough for
  // the largest size the controller allows within the capacity, or for the
  // target of the round it waits to close, never more than the nodes there.
  int agents_wanted() const {
    const int usable = std::min(capacity_, trace_.policy.max_replicas);
    int want = ctl_->largest_size_at_most(usable).value_or(0);
    if (phase_ == Phase::kWaiting) want = std::max(want, size_);
    return std::min(want, capacity_);
  }

  // Without spares, after everything that happened at now_: idle agents the
  // job cannot use are stopped, and agents it is short of are started on
  // idle nodes; they are up node_start later.
  void sync_agents() {
    if (spares_) return;
    const int want = agents_wanted();
    agents_ = std::max(members(), std::min(agents_, want));
    starting_ = std::min(starting_, std::max(0, want - agents_));
    const int short_of = want - agents_ - starting_;
    if (short_of > 0) {
      starting_ += short_of;
      schedule(now_ + trace_.node_start, TimerKind::kAgentsReady, short_of);
    }
  }

  void account_down() {
    r_.time_at_size[0] += now_ - phase_since_;
    phase_since_ = now_;
  }

  const Trace& trace_;
  std::unique_ptr<Controller> ctl_;
  const bool spares_;
  const bool hears_;  // spot notices, when they come
  const RecoveryCosts costs_;
  RunResult r_;

  Millis now_{0};
  int capacity_ = 0;
  // Available nodes running an agent: the members (not those lost or
  // leaving) and the agents waiting. All of them with spares.
  int agents_ = 0;
  int starting_ = 0;  // agents being started (without spares)
  int noticed_ = 0;   // spot nodes noticed and not gone yet: billed, out of capacity_
  // Of those, the nodes a job that does not hear notices still has, and
  // the members among them when noticed.
  int doomed_ = 0;
  int doomed_members_ = 0;
  Phase phase_ = Phase::kRunning;
  int size_ = 0;
  Millis phase_since_{0};
  Millis save_done_{0};
  std::optional<Millis> deadline_;
  uint64_t epoch_ = 0;
  std::optional<int> pending_scale_;  // a scale request that came while no round ran
  std::optional<int> last_running_size_;
  std::optional<std::pair<Millis, int>> last_scale_;  // time, direction
  int decisions_now_ = 0;
  SeriesRecorder series_{r_.series};

  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::set<Millis> rechecks_;
  uint64_t next_seq_ = 0;
};

}  // namespace

double RunResult::goodput() const {
  return duration.count() > 0 ? static_cast<double>(useful.count()) / duration.count() : 0;
}

double RunResult::token_efficiency() const {
  return ideal_tokens > 0 ? tokens / ideal_tokens : 1;
}

std::optional<double> RunResult::absorbed_idle_fraction() const {
  if (idle_node_hours <= 0) return std::nullopt;
  return absorbed_node_hours / idle_node_hours;
}

std::optional<double> RunResult::cost_per_unit() const {
  if (!cost || tokens <= 0) return std::nullopt;
  return *cost / tokens;
}

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
