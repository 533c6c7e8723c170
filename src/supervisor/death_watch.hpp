// Kills the agent's worker process groups when the agent dies, however it dies.
//
// A worker's parent-death signal covers the worker itself, but not what the
// worker forked: when the agent is SIGKILLed those grandchildren would be
// orphaned. The death watch is a tiny process forked at startup that holds
// the read end of a pipe whose only write end the agent holds. The agent
// tells it each process group it starts and retires. When the pipe reaches
// EOF (the agent exited or was killed: the kernel closes its descriptors
// either way) the watch sends SIGKILL to every group still registered and
// exits. Given the job's cgroup (cgroup.hpp), it then kills that too, which
// reaches what left every process group (setsid), and removes it with the
// attempts' cgroups below it. It sits in a process group of its own, outside
// the job cgroup, and ignores the terminal's signals, so a Ctrl-C or a kill
// of the agent's group does not take it first.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <vector>

#include "supervisor/cgroup.hpp"
#include "util/result.hpp"

namespace elasticrun::supervisor {

class DeathWatch {
 public:
  DeathWatch() = default;
  ~DeathWatch();  // retires the watch (closes the pipe) and reaps it
  DeathWatch(const DeathWatch&) = delete;
  DeathWatch& operator=(const DeathWatch&) = delete;

  // Forks the watch. Call early, before threads hold locks the child might need
  // (the child only makes system calls). job: the job cgroup to kill and
  // remove when the agent is gone, or none; the watch keeps its own
  // descriptor of it, so job may go first (then the watch finds it gone).
  // remove: what the watch removes once the agent is gone, each a
  // directory with everything in it (the memory tier) or a file (the
  // control block), which in /dev/shm would otherwise hold their memory
  // until the machine restarts; absolute paths, as supervisor::Removals
  // takes them.
  util::Status start(const Cgroup* job = nullptr, const std::vector<std::string>& remove = {});
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Registers / retires process groups. Cheap: one small write per call,
  // not per group, so that starting or retiring a node's workers wakes the
  // watch once. Best effort.
  void add(std::span<const pid_t> pgids);
  void remove(std::span<const pid_t> pgids);
  void add(pid_t pgid) { add(std::span<const pid_t>(&pgid, 1)); }
  void remove(pid_t pgid) { remove(std::span<const pid_t>(&pgid, 1)); }

 private:
  // Sends pgids, negated when retiring, in writes of at most PIPE_BUF bytes
  // (each atomic, so a message is never split between two writes).
  void send(std::span<const pid_t> pgids, bool retire);

  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace elasticrun::supervisor
