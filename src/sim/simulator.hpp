// The discrete-event simulation of one job under one policy: the nodes
// available over time (a timeline), the policy's decisions at every change
// and at the times it asks to be asked again, and the cost model turning
// them into downtime and lost work. docs/simulator.md defines every figure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/result.hpp"
#include "sim/timeline.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim {

// Runs `policy` (controller_names()) over `timeline` (expand(trace, seed)).
// Throws ConfigError for an unknown policy.
RunResult simulate(const Trace& trace, const std::vector<TimelineEvent>& timeline,
                   std::string_view policy);

// Expands the trace once with `seed` and runs each policy over the same
// timeline, in the order given.
std::vector<RunResult> compare(const Trace& trace, uint64_t seed,
                               const std::vector<std::string>& policies);

}  // namespace elasticrun::sim
