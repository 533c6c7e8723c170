#include "sim/timers.hpp"

#include <tuple>

namespace elasticrun::sim {

bool Timer::operator>(const Timer& o) const {
  return std::tuple(at, rank(), seq) > std::tuple(o.at, o.rank(), o.seq);
}

void TimerQueue::schedule(Millis at, TimerKind kind, uint64_t epoch, int agents, int members) {
  if (at >= end_) return;
  timers_.push({at, next_seq_++, kind, epoch, agents, members});
}

void TimerQueue::recheck(Millis at, uint64_t epoch) {
  if (rechecks_.insert(at).second) schedule(at, TimerKind::kRecheck, epoch);
}

Timer TimerQueue::pop() {
  const Timer t = timers_.top();
  timers_.pop();
  if (t.kind == TimerKind::kRecheck) rechecks_.erase(t.at);
  return t;
}

}  // namespace elasticrun::sim
