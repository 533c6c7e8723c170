// In-process re-formation for C++ workers (elasticrun --inprocess-restart;
// docs/inprocess.md): a worker that does not exit when its round ends, but
// parks and joins the next round in the same process. The Python SDK's
// elasticrun.inprocess.run() does all of it; in C++ the program keeps its
// own state and makes its own process groups, and these calls are the
// contract with the agent:
//
//   namespace er = elasticrun::sdk;
//   er::attach();
//   const bool reforms = er::inprocess::enable();
//   for (;;) {
//     auto group = make_group_from_environment();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT
//     share_state(*group);      // a joiner or a restarted rank takes a survivor's
//     bool done = false;
//     try {
//       done = train(*group);   // false when elastic_event_detected() stopped it
//     } catch (const std::exception&) {
//       if (!reforms || !er::inprocess::round_failed()) throw;
//     }
//     if (!reforms || done) return 0;
//     group.reset();            // the round's process groups go first
//     if (er::inprocess::park() == er::inprocess::Next::kExit) return 0;
//   }
//
// Under torchrun, in a fixed job, or without the flag, enable() is false and
// the program trains once. Call these from the training loop's thread.
#pragma once

#include <chrono>

#include "elasticrun/worker.hpp"

namespace elasticrun::sdk::inprocess {

// Whether this worker re-forms in process: under elasticrun
// --inprocess-restart, in an elastic job. Then it also marks the worker's
// slot INPROCESS: from now on the agent does not signal it when a round
// ends but waits for it to park() (within the stop's grace; after that it is
// killed and started again). Call once, after attach(). False elsewhere.
bool enable();

// Whether the current round ended by a failure, on this node or another:
// the agent published it (a restart, a lost member, the job's end; not a
// resize, whose ranks stop at the agreed step). For an error out of a
// collective: a broken round ends it, an error of the program's own does not. Waits up to `wait`
// for the agent's word (a lost peer on another node takes its heartbeat timeout to be noticed).
bool round_failed(std::chrono::milliseconds wait = std::chrono::seconds(30));

enum class Next {
  kRound,  // the next round's variables are in the environment: join it
  kExit,   // the agent dismissed this worker (the node leaves, the job ended): exit 0
};

// Call once this round's process groups are destroyed. Marks the slot
// PARKED, waits for the agent's next round, sets that round's variables
// in the environment (RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, ELASTICRUN_GENERATION, ...) with setenv() and
// clears the round's flags. setenv() is not safe beside another thread that
// reads or changes the environment: no other thread of the program may do
// so while park() runs. Throws Error without a control block, when
// enable() was not called, or when the announced assignment stays
// unreadable (2 s).
Next park();

}  // namespace elasticrun::sdk::inprocess
