#include "sim/simulator.hpp"

#include <algorithm>
#include <cassert>
#include <iterator>
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
      : trace_(trace), ctl_(make_controller(policy, trace)), spares_(ctl_->holds_spares()) {
    r_.policy = std::string(policy);
    r_.duration = trace.duration;
    r_.static_size = trace.start_size();
    r_.gpus_per_node = trace.gpus_per_node;
    capacity_ = trace.initial_capacity;
  }

  RunResult run(const std::vector<TimelineEvent>& timeline) {
    start();
    size_t next = 0;
    while (true) {
      const Millis event_at = next < timeline.size() ? timeline[next].at : trace_.duration;
      // Timers first at equal times: a round that is ready at t sees what
      // happens at t.
      if (!timers_.empty() && timers_.top().at <= event_at && timers_.top().at < trace_.duration) {
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
    advance(trace_.duration);
    if (phase_ == Phase::kRunning) {
      // The end of the trace is the end of the measurement, not a crash.
      account_running(true);
    } else {
      account_down();
    }
    mark(true);
    r_.down = r_.time_at_size[0];
    return std::move(r_);
  }

 private:
  enum class Phase {
    kRunning,     // training at size_
    kRestarting,  // a round of size_ closed; workers start and load until the Resume timer
    kWaiting,     // a round aiming at size_ waits for nodes (and maybe a deadline)
  };
  enum class TimerKind { kResume, kDeadline, kRecheck, kAgentsReady };
  struct Timer {
    Millis at;
    uint64_t seq;
    TimerKind kind;
    uint64_t epoch;  // kResume/kDeadline: stale when the round changed since
    int agents;      // kAgentsReady: how many were started
    // Agents that come up when a round's wait for replacements ends are in
    // time for it.
    int rank() const { return kind == TimerKind::kAgentsReady ? 0 : 1; }
    bool operator>(const Timer& o) const {
      return std::tuple(at, rank(), seq) > std::tuple(o.at, o.rank(), o.seq);
    }
  };

  void schedule(Millis at, TimerKind kind, int agents = 0) {
    if (at >= trace_.duration) return;
    timers_.push({at, next_seq_++, kind, epoch_, agents});
  }

  int members() const { return phase_ == Phase::kWaiting ? 0 : size_; }

  // Integrates what depends on capacity alone up to `t`.
  void advance(Millis t) {
    assert(t >= now_);
    if (t > now_) {
      const Millis dt = t - now_;
      const int usable = std::min(capacity_, trace_.policy.max_replicas);
      const int ideal = elastic::largest_allowed_at_most(trace_.policy, usable).value_or(0);
      r_.ideal_tokens += seconds(dt) * trace_.throughput.at(ideal);
      r_.idle_node_hours += hours(dt) * std::max(0, usable - r_.static_size);
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
      stretch_points_ = r_.series.size();
      observe();
    } else {
      begin_round(r_.static_size, now_, std::nullopt);
    }
    mark();
  }

  // Records the state after everything that happened at now_: a new point
  // when the capacity or the world size changed (the last one of an
  // instant wins), always at the end. Points taken while running hold the
  // progress before the stretch; account_running() completes them.
  void mark(bool always = false) {
    const SeriesPoint p{now_, capacity_, phase_ == Phase::kRunning ? size_ : 0, r_.useful,
                        r_.tokens};
    std::vector<SeriesPoint>& s = r_.series;
    auto same_state = [&](const SeriesPoint& q) {
      return q.capacity == p.capacity && q.world == p.world;
    };
    if (!s.empty() && s.back().at == now_) {
      s.back() = p;
      // A change undone within the instant is no change.
      if (s.size() >= 2 && same_state(s[s.size() - 2]) && !always) {
        s.pop_back();
        stretch_points_ = std::min(stretch_points_, s.size());
      }
    } else if (always || s.empty() || !same_state(s.back())) {
      s.push_back(p);
    }
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
    capacity_ = capacity_after(e, capacity_, trace_.nodes_max);
    switch (e.kind) {
      case EventKind::kCapacity: {
        // Nodes taken back beyond the idle ones are the job's, with notice.
        const int gone = std::max(0, held - capacity_);
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
        const int hit = e.pick ? (*e.pick * before < held ? 1 : 0) : std::min(e.count, held);
        nodes_changed(before, hit);
        if (e.kind == EventKind::kFail) {
          r_.members_lost += hit;
          react(hit, 0);
        } else {
          react(0, hit);
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
    const int idle = capacity_ - members();
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
      if (saved) save_done += trace_.checkpoint_save;
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
    schedule(std::max(now_, save_done_) + trace_.restart + trace_.checkpoint_load,
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
    stretch_points_ = r_.series.size();
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
    // Points taken during the stretch learn how much of their training
    // survived; after a crash, progress stops at the last checkpoint.
    for (size_t i = stretch_points_; i < r_.series.size(); ++i) {
      SeriesPoint& p = r_.series[i];
      const Millis survived = std::min(stretch(trace_, p.at - phase_since_).trained, kept);
      p.useful = r_.useful + survived;
      p.tokens = r_.tokens + seconds(survived) * rate;
    }
    if (kept < s.trained && s.durable_at > Millis(0)) {
      const Millis at = phase_since_ + s.durable_at;
      auto after = std::upper_bound(r_.series.begin(), r_.series.end(), at,
                                    [](Millis t, const SeriesPoint& p) { return t < p.at; });
      assert(after != r_.series.begin());
      if (std::prev(after)->at < at) {
        r_.series.insert(after, {at, std::prev(after)->capacity, size_, r_.useful + kept,
                                 r_.tokens + seconds(kept) * rate});
      }
    }
    stretch_points_ = r_.series.size();
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
      agents_ = capacity_;
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
  RunResult r_;

  Millis now_{0};
  int capacity_ = 0;
  // Available nodes running an agent: the members (not those lost or
  // leaving) and the agents waiting. All of them with spares.
  int agents_ = 0;
  int starting_ = 0;  // agents being started (without spares)
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
  size_t stretch_points_ = 0;  // the first point of the running stretch

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
