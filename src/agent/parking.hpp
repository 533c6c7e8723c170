// --inprocess-restart, the agent's side of the control block: which
// workers park when their round ends instead of exiting, whether they have,
// and the two events that move parked workers on (the next round's place)
// or out (this node's workers are no longer wanted). No state of its own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "control/assignment.hpp"
#include "control/control_block.hpp"
#include "util/result.hpp"

namespace elasticrun::agent {

// Local rank `local_rank`'s worker, process `pid`, re-forms in process:
// its SDK set kFlagInprocess (a slot written by an earlier process of that
// rank does not count).
bool reforms(const control::ControlBlock& block, int local_rank, pid_t pid);

// It has left its round and waits for the next one (kFlagParked).
bool parked(const control::ControlBlock& block, int local_rank, pid_t pid);

// The next round's place for parked workers: each local rank's environment
// into the assignment file (control/assignment.hpp), then EventKind::reform with the
// round and its world size. The error, from the file, names it; the event
// is not published then.
util::Status publish_reform(control::ControlBlock& block, uint64_t generation, int world_size,
                            const std::vector<control::RankEnv>& ranks);

// Parked workers exit (EventKind::shutdown, the generation kept).
void dismiss_parked(control::ControlBlock& block, const std::string& reason);

}  // namespace elasticrun::agent
