// cgroup v2 directories of the agent's making, which hold its workers and
// everything they start.
//
// A process group does not hold what a worker starts: a daemonised helper
// (setsid) leaves the group and the session, and outlives the attempt. A
// cgroup does: no process leaves one unless someone moves it. So where the
// machine lets the agent create cgroups, it makes a job cgroup, <its own
// cgroup>/elasticrun-<pid>-<random>, and one below that per attempt. Workers
// join the attempt's before their exec (SpawnSpec::cgroup_fd; a warm
// interpreter is moved in with add() before it is told its script), and the
// attempt ends by killing that cgroup and removing it. The death watch kills
// the job cgroup when the agent dies. No controller is enabled anywhere:
// these cgroups only group processes, which also keeps the kernel's "no
// internal processes" rule out of the way.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "util/result.hpp"

namespace elasticrun::supervisor {

// How long kill() waits, by default, for the processes to be gone.
inline constexpr std::chrono::milliseconds kCgroupKillTimeout{5000};

class Cgroup {
 public:
  Cgroup() = default;  // none: procs_fd() is -1; kill() and remove() do nothing
  ~Cgroup();           // kill(), then remove(); best effort
  Cgroup(Cgroup&& other) noexcept;
  Cgroup& operator=(Cgroup&& other) noexcept;
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  // This process's job cgroup: a fresh directory below its own cgroup
  // (own_cgroup_dir), proven usable by moving a short-lived child into it.
  // The error says why there is none (no cgroup v2, a read-only mount, no
  // permission). Forks that child and waits for it by pid: call it before a
  // reaper with waitpid(-1) could take it.
  static util::Result<Cgroup> create_job(const std::string& proc_root = "/proc");

  // A new cgroup below this one (an attempt's). A leftover of that name,
  // empty, is removed first; a populated one is an error (EBUSY).
  util::Result<Cgroup> child(const std::string& name) const;

  bool valid() const { return dir_fd_ >= 0; }
  const std::string& path() const { return path_; }
  // The directory, open (O_DIRECTORY): what the death watch holds.
  int dir_fd() const { return dir_fd_; }
  // cgroup.procs, open for writing: a process that writes "0" to it joins.
  int procs_fd() const { return procs_fd_; }

  // Moves pid, every thread of it, into this cgroup.
  util::Status add(pid_t pid) const;
  // Whether any process is in this cgroup or below it; zombies do not count.
  bool populated() const;

  // SIGKILLs every process in this cgroup and below (cgroup.kill; before
  // Linux 5.14, every pid cgroup.procs lists, over again) and waits until
  // none is left, at most timeout (then ETIMEDOUT). The killed become
  // zombies of their parents, or of the agent as their subreaper: reaping
  // them is the caller's business.
  util::Status kill(std::chrono::milliseconds timeout = kCgroupKillTimeout);

  // Removes the directory and the cgroups below it; valid() is false after.
  // EBUSY while a process is left. A directory already gone is no error.
  util::Status remove();

 private:
  static util::Result<Cgroup> open_new(const std::string& path);
  void close_fds();

  std::string path_;
  int dir_fd_ = -1;
  int procs_fd_ = -1;
};

// Writes pid to a cgroup.procs open for writing (Cgroup::procs_fd()).
util::Status move_to_cgroup(int procs_fd, pid_t pid);

// The directory of this process's cgroup v2: the "0::" line of
// <proc_root>/self/cgroup under the cgroup2 mount that <proc_root>/self/
// mountinfo lists for it. The error says why there is none (cgroup v1 only,
// no cgroup2 mount, or none that shows this cgroup).
util::Result<std::string> own_cgroup_dir(const std::string& proc_root = "/proc");

}  // namespace elasticrun::supervisor
