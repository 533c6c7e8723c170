// The timers of one simulated run: when a restarting round resumes, when a
// waiting round's wait for replacements is over, when the policy asked to be
// asked again, when agents being started are up, and when noticed nodes go.
// The run fires them in time order, before its timeline's events at the
// same time.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <set>
#include <vector>

#include "sim/duration.hpp"

namespace elasticrun::sim {

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
  bool operator>(const Timer& o) const;
};

// The pending timers, earliest first; at one time agents coming up first,
// then in the order scheduled.
class TimerQueue {
 public:
  // Timers at or after `end` (the trace's duration) are dropped: the run is
  // over by then.
  explicit TimerQueue(Millis end) : end_(end) {}

  // A timer of `kind` at `at`, for the round of `epoch`; `agents` and
  // `members` as Timer's.
  void schedule(Millis at, TimerKind kind, uint64_t epoch, int agents = 0, int members = 0);

  // A kRecheck at `at`, unless one is pending there already.
  void recheck(Millis at, uint64_t epoch);

  bool empty() const { return timers_.empty(); }
  // The earliest pending timer; not empty().
  const Timer& top() const { return timers_.top(); }
  // Takes the earliest pending timer off the queue; not empty(). A recheck
  // taken is no longer pending: one at the same time may be scheduled again.
  Timer pop();

 private:
  const Millis end_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::set<Millis> rechecks_;  // the times of pending rechecks
  uint64_t next_seq_ = 0;
};

}  // namespace elasticrun::sim
