// Starting a worker process with a clean slate.
//
// The child gets its own session and process group (so a signal to -pgid
// reaches the worker and everything it forked, and a terminal's Ctrl-C only
// the agent), the default disposition and an empty mask
// for every signal, a parent-death signal (so a worker dies with its agent even
// when the agent is SIGKILLed), the given environment and standard streams,
// and no other inherited descriptor, optionally a CPU affinity (set with
// sched_setaffinity before the exec, so the program's first thread and
// every thread it starts have it) and a cgroup (joined first of all, so
// that nothing the program starts is ever outside it). An exec failure is
// reported to the parent synchronously through a close-on-exec pipe, so "no
// such file" is an error from spawn(), not a mysterious exit code 127 later.
// On x86-64 the child runs on the parent's memory until its exec instead of
// on a copy (spawn.cpp, ChildPlan, says why and what that rules out).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::supervisor {

struct SpawnSpec {
  // argv[0] is looked up in PATH when it has no slash.
  std::vector<std::string> argv;
  // The complete environment, "NAME=value" each.
  std::vector<std::string> env;
  // Descriptors for the child's stdin, stdout and stderr; -1 keeps the parent's.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // A descriptor the child gets as fd 3 (a channel to the agent), or -1 for
  // none. Must be above 3 itself; every other descriptor is closed as usual.
  int extra_fd = -1;
  // Working directory; empty keeps the parent's.
  std::string cwd;
  // Signal the child receives when the thread that spawned it dies.
  int parent_death_signal = 9;  // SIGKILL
  // The CPUs the child may run on (ascending or not, each below
  // util::kMaxCpu); empty keeps the parent's affinity. A set the kernel
  // refuses (no CPU of it online and in the child's cpuset) fails the
  // spawn with EINVAL from sched_setaffinity.
  std::vector<int> cpu_affinity;
  // A cgroup.procs file open for writing (Cgroup::procs_fd()): the child
  // writes "0" to it, joining that cgroup, before anything else. -1 stays
  // in the parent's cgroup. A cgroup that cannot be joined (gone, not
  // ours) fails the spawn with the kernel's error.
  int cgroup_fd = -1;
};

// Forks and execs. Returns the child's pid, which is also its process group id.
util::Result<pid_t> spawn(const SpawnSpec& spec);

// spawn() in two halves, so that many workers exec in parallel: start_spawn
// starts the child and returns at once; finish_spawn waits until that child
// has exec'd (or reports why it could not, reaping it). Every started spawn
// should be finished; one that is dropped instead waits in its destructor
// until the child has exec'd or exited, and leaves the child to be reaped.
struct ChildPlan;
struct PendingSpawn {
  pid_t pid = -1;
  int report_fd = -1;
  std::string program;
  // What the child reads until its exec (it may share our memory till then).
  struct PlanDeleter {
    void operator()(ChildPlan* plan) const;
  };
  std::unique_ptr<ChildPlan, PlanDeleter> plan;

  PendingSpawn() = default;
  PendingSpawn(PendingSpawn&& other) noexcept;
  PendingSpawn& operator=(PendingSpawn&& other) noexcept;
  ~PendingSpawn();

 private:
  void wait_for_exec();
};
util::Result<PendingSpawn> start_spawn(const SpawnSpec& spec);
util::Result<pid_t> finish_spawn(PendingSpawn& pending);

// Makes this process a child subreaper: orphaned descendants are reparented to
// it (not to init), so the agent reaps grandchildren and can account for them.
util::Status become_subreaper();

}  // namespace elasticrun::supervisor
