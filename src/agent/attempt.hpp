// One attempt: the workers of one node for one rendezvous round, started
// together, watched on one libuv loop until every one has exited.
//
// The loop carries every event of the attempt: child exits (SIGCHLD),
// forwarded signals, the shutdown timer, log pipes, and messages from the
// owner's helper threads (the round ended elsewhere). What the attempt
// cannot decide alone (what a failure means for the other nodes, how to
// tell workers to stop) it asks its delegate, on the loop.
#pragma once

#include <uv.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.hpp"
#include "agent/inbox.hpp"
#include "agent/stacks.hpp"
#include "agent/warm_start.hpp"
#include "agent/worker_env.hpp"
#include "control/control_block.hpp"
#include "health/fault.hpp"
#include "memory/tier.hpp"
#include "serve/metrics.hpp"
#include "supervisor/cgroup.hpp"
#include "supervisor/death_watch.hpp"
#include "supervisor/log_pump.hpp"
#include "supervisor/worker_group.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {

enum class Outcome {
  kSucceeded,  // every worker exited 0 on its own
  kFailed,     // a worker failed; the others were stopped
  kSignaled,   // a forwarded signal ended the attempt
  kStopped,    // stopped on request (the round ended): not a failure
};

// Where a worker stands with a rescue (AttemptDelegate::rescue).
enum class Rescue {
  kNone,      // it cannot save one: it gets --shutdown-signal at once
  kPossible,  // it can (it attached the SDK), and has not begun
  kUnderWay,  // it is writing one
};

// What the owner of a running attempt may ask of it: on the attempt's loop
// only (a delegate's callback, or a message from its Inbox).
class AttemptControl {
 public:
  // Stops the workers because the round ended elsewhere, for `reason`: the
  // delegate's tell_stop() decides how. Only the first request counts, and
  // none once the attempt is stopping for another reason.
  virtual void request_stop(const std::string& reason) = 0;
  // A health monitor found a fault. The attempt records why (the stacks of
  // its running workers, <attempt>/fault.json), tells the delegate
  // (on_fault), and stops the workers as after a worker failure. Only the
  // first fault counts, and none once the attempt is stopping.
  virtual void report_fault(const health::Fault& fault) = 0;
  // The workers, for a look at who still runs.
  virtual const supervisor::WorkerGroup& workers() const = 0;
  // Where they are: the global rank of local rank 0, and the restart count
  // (TORCHELASTIC_RESTART_COUNT) they were given.
  virtual int rank_offset() const = 0;
  virtual int restart_count() const = 0;

 protected:
  ~AttemptControl() = default;
};

// The owner's side of one attempt: the fixed loop's or the dynamic round's.
// Every method runs on the attempt's loop and must return at once: store
// traffic goes to the owner's courier, never through here.
class AttemptDelegate {
 public:
  virtual ~AttemptDelegate() = default;

  // The workers have started; `control` stays valid until the attempt returns.
  virtual void attempt_started(AttemptControl& control) { (void)control; }
  // Once, when the first worker fails (before the others are stopped).
  virtual void on_failure(const supervisor::WorkerExit& exit) { (void)exit; }
  // Once, when a health monitor's fault stops the attempt (stacks recorded,
  // workers not yet stopped): the other nodes should stop too.
  virtual void on_fault(const health::Fault& fault) { (void)fault; }
  // A handled signal arrived, the first one. True: it means "this node
  // leaves" (the dynamic agent). Then it is not forwarded; the delegate
  // ends the round, and the workers stop as for any stop request (SIGUSR1
  // and the agreed step, via tell_stop). If no stop request comes within
  // --graceful-shutdown-timeout, or a second signal arrives, it is
  // forwarded as usual. The attempt's result carries the signal either way.
  virtual bool on_signal(int signo) {
    (void)signo;
    return false;
  }
  // A stop request arrived: tell the workers. True when it told them to
  // stop at an agreed step (SIGUSR1 and the control block of a resize).
  // False: the round ended by a failure, and the workers are stopped as
  // after a failure here (below). The attempt SIGKILLs what is left after
  // --graceful-shutdown-timeout either way.
  virtual bool tell_stop(supervisor::WorkerGroup& workers) {
    (void)workers;
    return false;
  }
  // After a failure, here or on another node, --shutdown-signal goes to
  // every worker's process group, except that workers which can save a
  // rescue get rescue_window() first: a survivor whose collective fails
  // writes the state of the last step it completed (python/elasticrun/
  // checkpoint.py). One whose rescue is under way by then is left to
  // finish; SIGKILL comes at the grace, counted from the window's end.
  // A zero window: the signal at once, to every worker.
  virtual Rescue rescue(int local_rank) {
    (void)local_rank;
    return Rescue::kNone;
  }
  virtual std::chrono::milliseconds rescue_window() { return std::chrono::milliseconds(0); }
  // Every --monitor-interval while the workers run: progress sampling.
  virtual void tick(std::chrono::steady_clock::time_point now) { (void)now; }
  // A line of local rank `local_rank`'s stdout or stderr, for the streams
  // a log rule reads (rules_read_output): they pass through the agent.
  virtual void on_log_line(int local_rank, std::string_view line) {
    (void)local_rank;
    (void)line;
  }
};

// What a node knows for every attempt: set up once by run_agent.
struct NodeContext {
  supervisor::DeathWatch* watch = nullptr;
  // The job's cgroup, below which each attempt's workers run; none (null or
  // not valid) where the machine does not let the agent make one.
  supervisor::Cgroup* job_cgroup = nullptr;
  std::filesystem::path run_dir;
  std::string host;                         // this host's name (log prefixes)
  std::map<std::string, std::string> base;  // the workers' base environment
  WarmPool* warm = nullptr;                 // --warm-start's interpreters, or none
  // --numa-binding: the CPUs of each local rank's worker; empty: no binding.
  std::vector<std::vector<int>> cpu_sets;
  // The control block shared with the workers (ELASTICRUN_CONTROL_FILE in
  // base), or null when none could be made.
  control::ControlBlock* control = nullptr;
  // GPU health (--gpu-health), or null where it is off or skipped.
  GpuWatch* gpu = nullptr;
  // The agent's event log (docs/events.md); never null (a disabled one
  // records nothing).
  events::EventLog* events = &events::EventLog::disabled();
  // The node's Prometheus metrics, or null where the agent serves none.
  serve::AgentMetrics* metrics = nullptr;
  // The node's memory tier (docs/memory-tier.md; ELASTICRUN_MEMORY_DIR in
  // base), or null when it is off or could not be made.
  memory::Tier* memory = nullptr;
};

class Attempt;

// --inprocess-restart: the workers of an attempt that ended with every one
// still running parked, alive and waiting for their next round; give them
// to the next run_attempt, which resumes them there (docs/inprocess.md).
// Destroying the last reference dismisses them: they are told to exit
// (EventKind::shutdown), SIGKILLed after --shutdown-timeout, and nothing of
// them is left. The agent's main thread only.
class ParkedWorkers {
 public:
  explicit ParkedWorkers(std::unique_ptr<Attempt> attempt);
  ~ParkedWorkers();
  ParkedWorkers(const ParkedWorkers&) = delete;
  ParkedWorkers& operator=(const ParkedWorkers&) = delete;

  Attempt& attempt() { return *attempt_; }
  size_t count() const;  // the parked workers

 private:
  std::unique_ptr<Attempt> attempt_;
};

struct AttemptResult {
  Outcome outcome = Outcome::kFailed;
  std::vector<supervisor::WorkerExit> failures;
  std::vector<std::string> error_files;
  int stop_signal = 0;
  std::optional<std::string> stop_reason;
  // The health fault that stopped the attempt, and the stacks recorded for it.
  std::optional<health::Fault> fault;
  std::vector<StackResult> stacks;
  std::vector<std::string> stack_files;  // of each local rank
  // Set when the workers parked (--inprocess-restart) rather than exited.
  std::shared_ptr<ParkedWorkers> parked;
};

// torchrun's failure report of a failed attempt (failure_report.hpp).
struct FailureReport;
FailureReport failure_report(const AgentConfig& config, const AttemptResult& result);

// Starts this node's workers for `a` (logs and error files under
// <run_dir>/attempt_<attempt>/), runs the pre/post-train hooks around them,
// and returns when all have exited, or (--inprocess-restart) when every
// one still running has parked: then the result holds them. `inbox`, when
// given, carries messages from the delegate's helper threads to the
// attempt's loop. `parked`: the previous attempt's parked workers, which
// go on in this round with `a` (its assignment is published to them
// through the control block); only local ranks without a process start,
// and no hook runs. The control block is not reset then: its slots are
// the running workers'.
AttemptResult run_attempt(const AgentConfig& config, const NodeContext& node, const Assignment& a,
                          int attempt, AttemptDelegate& delegate, Inbox* inbox = nullptr,
                          std::shared_ptr<ParkedWorkers> parked = nullptr);

}  // namespace elasticrun::agent
