// The worker side of an elastic job, for C++ training programs: the same
// calls, with the same meaning, as the Python SDK (`import elasticrun`,
// python/elasticrun/__init__.py), over the node's control block
// (docs/protocol.md, "The control block"). No libtorch needed.
//
//   elasticrun::sdk::attach();
//   for (int64_t step = start + 1; step <= total; ++step) {
//     train_step();
//     elasticrun::sdk::step(step);
//     if (elasticrun::sdk::elastic_event_detected()) {
//       elasticrun::sdk::stopped();
//       save_checkpoint(step);
//       elasticrun::sdk::saved();
//       return 0;  // the agent restarts the job at the new size
//     }
//   }
//
// Under elasticrun the agent writes a scale event and, once the nodes agreed
// on it, the step every rank stops at into the block
// ($ELASTICRUN_CONTROL_FILE), and sends SIGUSR1 to attached workers. So
// every rank stops at the same step without a collective per step, and a
// check is a load from the mapped block: no system call.
//
// Under torchrun (no control file), and under a fixed elasticrun job
// (static, standalone: its block publishes no scale events, only the health
// monitors read it), elastic_event_detected() is always false, unless
// HYPERPOD_SIGNAL_COORDINATION=distributed: then, as with AWS hyperpodrun, it asks the signal
// coordinator (set_signal_coordinator; the libtorch part installs an all-reduce MAX over a process
// group) whether any rank received SIGUSR1, and without one returns this rank's own flag.
//
// State is per process, read from the environment on first use
// (ELASTICRUN_CONTROL_FILE, LOCAL_RANK). Call these functions from one
// thread (the training loop's); only signal_received() may be called from
// any thread. Failures throw elasticrun::Error (a control file that is not a
// control block) or ConfigError (LOCAL_RANK that is not a slot of the block).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "elasticrun/errors.hpp"

namespace elasticrun::sdk {

// Installs the SIGUSR1 handler (chaining a handler installed before it) and,
// under elasticrun, marks this rank ATTACHED in the control block, which
// tells the agent it may signal it. Call it before training, once the
// program's own signal handlers are installed. Idempotent. True when a
// control block was found.
bool attach();

// Publishes that this rank finished step n (into the mapped block; no
// system call). Metrics not given keep the last reported values. A loss
// that is NaN or infinite is flagged for the rest of the attempt: the
// agent's non-finite-loss monitor acts on it (docs/health.md). The time the
// last Compute scope took goes with the step.
void step(int64_t n, std::optional<double> loss = std::nullopt,
          std::optional<double> tokens_per_s = std::nullopt);

// Times its scope (the step's own work, without waiting for peers): the
// next step() publishes it, and the agents compare it across nodes to find
// a straggler. On a GPU, end the scope with a synchronisation.
class Compute {
 public:
  Compute();
  ~Compute();
  Compute(const Compute&) = delete;
  Compute& operator=(const Compute&) = delete;

 private:
  int64_t start_ns_;
};

// Marks its scope as a long stretch that is not a hang (evaluation, a
// checkpoint save): the agent's hang monitor expects no step until it
// ends. With a timeout (seconds), a section that lasts longer is a hang
// itself; without, it is never one. Mark it on every rank that waits in it.
// Sections nest; the innermost is the one shown.
class Section {
 public:
  explicit Section(std::string name, std::optional<double> timeout_s = std::nullopt);
  ~Section();
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;
};

// Whether this process received SIGUSR1 since attach(). Async-signal-safe
// to read from any thread.
bool signal_received();

// True when this rank should stop now: an event is pending, its stop step
// is agreed, and the last step given to step() has reached it. The same on
// every rank at the same step. Without a control file, see above.
bool elastic_event_detected();
// The same, for `step` instead of the last one given to step().
bool elastic_event_detected(int64_t step);

// What the worker knows of its job. Fields from the control block are
// empty without one (under torchrun).
struct Info {
  std::optional<int> rank;        // RANK
  std::optional<int> world_size;  // WORLD_SIZE
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT
  std::optional<std::string> control_file;
  int local_rank = 0;  // LOCAL_RANK
  bool attached = false;
  bool signal_received = false;
  std::optional<int64_t> last_step;
  std::optional<uint64_t> generation;        // the agent's rendezvous round
  std::optional<uint64_t> event_seq;         // events published on this node so far
  std::optional<std::string> event_kind;     // "none", "scale_up", "scale_down", ...
  std::optional<int64_t> stop_step;          // -1: not agreed yet
  std::optional<int32_t> next_world_size;    // -1: unknown
  std::optional<uint64_t> deadline_unix_ms;  // 0: none
  std::optional<std::string> reason;         // why the last event (or restart) happened
};
Info info();

// The health monitors' name for step(): this rank is alive at step n.
void heartbeat(int64_t n);

// Publishes metrics for the current step (the last one given to step(),
// -1 before the first).
void report(std::optional<double> loss = std::nullopt,
            std::optional<double> tokens_per_s = std::nullopt);

// Tells the agent this rank reached the stop step and is checkpointing.
void stopped();

// Tells the agent this rank's checkpoint shard is written.
void saved();

// HYPERPOD_SIGNAL_COORDINATION=distributed without a control file:
// elastic_event_detected() returns coordinator(signal_received()), which
// must be the MAX of the flag over every rank (a collective each rank calls
// at the same step). An empty function restores the default, the local flag.
void set_signal_coordinator(std::function<bool(bool)> coordinator);

}  // namespace elasticrun::sdk
