// What the death watch's child and Cgroup both do to a cgroup v2 directory,
// in system calls and nothing else: no allocation, no locks, no stdio, so it
// is safe in a process forked from a multi-threaded one (the death watch).
// Each takes a descriptor of the cgroup's directory, opened by the caller;
// none changes anything outside that directory and the cgroups below it.
// Results are >= 0 on success, -errno on failure.
#pragma once

namespace elasticrun::supervisor {

// How deep below a cgroup these walk. A worker that may create cgroups
// (root) may nest them; deeper than this is left alone, and its removal
// fails with EBUSY.
inline constexpr int kMaxCgroupDepth = 8;

// Writes "1" to cgroup.kill: the kernel SIGKILLs every process in the cgroup
// and below, and any it forks meanwhile. -ENOENT before Linux 5.14 (no such
// file) or once the cgroup is gone.
int cgroup_write_kill(int dir_fd);

// SIGKILL to every pid cgroup.procs lists, here and in every cgroup below.
// What cgroup.kill does, in one pass: a process forked meanwhile is missed,
// so the caller repeats until cgroup_populated() says 0. Returns how many
// pids it signalled.
int cgroup_kill_listed(int dir_fd);

// 1 while a process is in the cgroup or below (cgroup.events' "populated"),
// 0 when none is. A process leaves its cgroup when it exits, before its
// parent reaps it, so zombies do not count.
int cgroup_populated(int dir_fd);

// Removes every cgroup below dir_fd, deepest first (the directory itself
// stays: its parent removes it). -EBUSY when one is still populated.
int cgroup_remove_below(int dir_fd);

// Not a cgroup's: removes every file and directory below dir_fd, to
// kMaxCgroupDepth levels (the directory itself stays). The death watch
// removes the agent's memory tier with it (memory/tier.hpp).
int remove_tree_below(int dir_fd);

}  // namespace elasticrun::supervisor
