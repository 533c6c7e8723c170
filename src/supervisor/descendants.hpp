// What the workers' descendants leave with the agent as its child subreaper.
//
// When a process dies, its children go to the nearest ancestor that is a
// subreaper: the agent (become_subreaper). A worker's daemonised helper
// (setsid) is out of every process group the agent signals; once its parent
// exits it is the agent's child, so the agent can find it by its parent pid
// and kill it, cgroup or not. Killing one hands its own children to the agent
// in turn, so the sweep goes on until a scan of /proc finds none.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <span>
#include <string>
#include <vector>

namespace elasticrun::supervisor {

// The processes that <proc_root>/<pid>/stat lists with `parent` as their
// parent, zombies included, in no particular order.
std::vector<pid_t> children_of(pid_t parent, const std::string& proc_root = "/proc");

// SIGKILLs and reaps every child of this process but those in `spare` (the
// agent's own helpers: the death watch, idle warm interpreters), scanning
// again after each round, until a scan finds none or `timeout` has passed.
// Reaps by pid, never with waitpid(-1), so a spared child's exit stays for
// its owner to collect. Returns how many it reaped.
//
// A pid this finds is safe to kill: it is our child, and nobody else reaps
// our children, so it cannot be recycled before we reap it. That holds only
// while no other thread of ours reaps meanwhile; the agent reaps on its
// loop, which is where this is called.
size_t kill_reparented(std::span<const pid_t> spare,
                       std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace elasticrun::supervisor
