// What happens to the job's nodes over a run: the trace's events merged with
// the random failures and spot notices its generators draw. Expanded once
// per run, so every policy compared faces exactly the same capacity.
#pragma once

#include <optional>
#include <vector>

#include "sim/trace.hpp"

namespace elasticrun::sim {

struct TimelineEvent {
  Millis at{0};
  EventKind kind = EventKind::kCapacity;
  int count = 0;
  // Generated failures and notices hit one node drawn uniformly from the
  // available ones (notices: the available spot nodes): the job's member
  // when pick * nodes < members (the members on spot nodes). The trace's own
  // fail and spot_notice events hit members first (no pick).
  std::optional<double> pick;
  int line = 0;  // the trace line; 0 for generated events
};

// The nodes available after `e`, from `capacity` before it: capacity sets
// it, preempt and fail take nodes away (never below 0), spot_notice takes
// spot nodes away (never more than there are: trace.fleet), replace adds
// nodes (never above nodes_max); scale changes nothing.
int capacity_after(const TimelineEvent& e, int capacity, const Trace& trace);

// The trace's events after time 0 and, with a generator, its events: the
// next failure (notice) comes after an exponential time with rate
// rate_per_node_hour * available nodes (available spot nodes), redrawn
// whenever the number of
// available nodes changes (the process is memoryless, so the redraw keeps
// the rate right); each failed node comes back `repair` later as a
// `replace 1`, each noticed one is replaced `replace` later. Deterministic
// for a seed on every platform (no std:: distributions). Events at the same
// time keep this order: the trace's, replacements, failures, notices.
std::vector<TimelineEvent> expand(const Trace& trace, uint64_t seed);

}  // namespace elasticrun::sim
