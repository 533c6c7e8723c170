// One attempt: the workers of one node for one rendezvous round, started
// together, watched on one libuv loop until every one has exited.
//
// The loop carries every event of the attempt: child exits (SIGCHLD),
// forwarded signals, the shutdown timer, log pipes, and a stop request from
// another thread (the round ended elsewhere).
#pragma once

#include <uv.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "agent/warm_start.hpp"
#include "agent/worker_env.hpp"
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

// A request to stop the attempt, posted from any thread. The attempt may not
// exist yet when it arrives, or have finished: the channel keeps it.
class StopChannel {
 public:
  void post(std::string reason);
  std::optional<std::string> pending() const;
  // The attempt's loop registers its wakeup while it runs (a pending request
  // wakes it at once) and removes it before the loop goes away.
  void attach(uv_async_t* async);
  void detach();

 private:
  mutable std::mutex mu_;
  std::optional<std::string> reason_;
  uv_async_t* async_ = nullptr;
};

// Where a worker stands with a rescue (AttemptHooks::rescue).
enum class Rescue {
  kNone,      // it cannot save one: it gets --shutdown-signal at once
  kPossible,  // it can (it attached the SDK), and has not begun
  kUnderWay,  // it is writing one
};

struct AttemptHooks {
  // On the loop, once, when the first worker fails (before the others are
  // stopped): the dynamic agent ends the round here so other nodes stop too.
  std::function<void(const supervisor::WorkerExit&)> on_failure;
  // On the loop, once, when a handled signal arrives.
  std::function<void(int signo)> on_signal;
  // The first handled signal means "this node leaves" (the dynamic agent):
  // it is not forwarded; on_signal ends the round, and the workers stop as
  // for any stop request (SIGUSR1 and the agreed step, via tell_stop). If no
  // stop request comes within --graceful-shutdown-timeout, or a second
  // signal arrives, the signal is forwarded as usual. The attempt's result
  // carries the signal either way.
  bool signal_means_leave = false;
  // Stop requests from other threads; may be null.
  StopChannel* stop = nullptr;
  // How the workers are told to stop on such a request (on the loop): true
  // when it told them (SIGUSR1 and the agreed step of a resize). False, or
  // when empty: the round ended by a failure, and the workers are stopped
  // as after a failure here (below). The attempt SIGKILLs what is left
  // after --graceful-shutdown-timeout either way.
  std::function<bool(supervisor::WorkerGroup&)> tell_stop;
  // After a failure, here or on another node, --shutdown-signal goes to
  // every worker's process group, except that workers which can save a
  // rescue get rescue_window() first: a survivor whose collective fails
  // writes the state of the last step it completed (python/elasticrun/
  // checkpoint.py). One whose rescue is under way by then is left to
  // finish; SIGKILL comes at the grace, counted from the window's end.
  // Empty, or a zero window: the signal at once, to every worker.
  std::function<Rescue(int local_rank)> rescue;
  std::function<std::chrono::milliseconds()> rescue_window;
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
};

struct AttemptResult {
  Outcome outcome = Outcome::kFailed;
  std::vector<supervisor::WorkerExit> failures;
  std::vector<std::string> error_files;
  int stop_signal = 0;
  std::optional<std::string> stop_reason;
};

// Starts this node's workers for `a` (logs and error files under
// <run_dir>/attempt_<attempt>/), runs the pre/post-train hooks around them,
// and returns when all have exited.
AttemptResult run_attempt(const AgentConfig& config, const NodeContext& node, const Assignment& a,
                          int attempt, const AttemptHooks& hooks);

}  // namespace elasticrun::agent
