// The worker processes of one attempt on one node.
//
// Each worker leads its own process group; signals go to the group so that
// whatever a worker forked receives them too. Reaping is the caller's loop's
// business (on SIGCHLD it calls reap(), which also collects orphaned
// grandchildren reparented to the agent as a subreaper). No method blocks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "supervisor/death_watch.hpp"
#include "supervisor/spawn.hpp"

namespace elasticrun::supervisor {

struct WorkerExit {
  int local_rank = -1;
  pid_t pid = -1;
  int exit_code = 0;    // when exited normally
  int term_signal = 0;  // when killed by a signal
  std::chrono::system_clock::time_point when;

  bool failed() const { return exit_code != 0 || term_signal != 0; }
  // "exitcode 1" or "signal 9 (SIGKILL)".
  std::string describe() const;
};

class WorkerGroup {
 public:
  explicit WorkerGroup(DeathWatch* watch = nullptr) : watch_(watch) {}

  // Starts one worker per spec, local rank = index. If one cannot start, the
  // ones already started are killed and reaped, and the error names the rank.
  // running[i] > 0 adopts that already running child of ours (its own
  // process group leader) as local rank i instead of starting specs[i].
  util::Status start(const std::vector<SpawnSpec>& specs, const std::vector<pid_t>& running = {});

  // Collects every child that has exited (workers and anything else the
  // agent has become the parent of) and returns the workers among them, in
  // the order they were reaped.
  std::vector<WorkerExit> reap();

  // Sends sig to the process group of every worker, including groups whose
  // leader already exited but whose members may live on.
  void signal_all(int sig);

  size_t size() const { return workers_.size(); }
  size_t running() const;
  bool all_exited() const { return running() == 0; }
  const std::vector<WorkerExit>& exits() const { return exits_; }
  pid_t pid(int local_rank) const { return workers_.at(static_cast<size_t>(local_rank)).pid; }
  // Sends sig to one worker process (not its group: a worker's helper
  // processes may not handle it), unless it has already been reaped.
  void signal_one(int local_rank, int sig);
  // Sends sig to one worker's process group, as signal_all does to each.
  void signal_group(int local_rank, int sig);
  bool exited(int local_rank) const { return workers_.at(static_cast<size_t>(local_rank)).exited; }

  // Retires the groups from the death watch (after they were killed and reaped).
  void forget();

 private:
  struct Worker {
    pid_t pid = -1;
    bool exited = false;
  };
  DeathWatch* watch_;
  std::vector<Worker> workers_;
  std::vector<WorkerExit> exits_;
};

// glibc's name of a signal ("SIGTERM"), or its number as text.
std::string signal_name(int sig);

}  // namespace elasticrun::supervisor
