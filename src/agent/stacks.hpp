// Before the agent kills a worker for a fault, it records where the worker
// was: every Python thread's stack, in <attempt>/<local rank>/stacks.txt.
//
// Two ways, in this order. A worker that attached the SDK registered
// faulthandler on stack_signal() (it set kFlagStacks): the signal makes its
// C-level handler write every thread's stack at once, even while the main
// thread is blocked inside a collective. Any other Python worker is read
// from outside with py-spy (`py-spy dump --nonblocking`), when py-spy is on
// the workers' PATH and the agent may ptrace them. A stopped worker
// (SIGSTOP) runs no handler, and is not continued for one (the job could
// run on for a moment): only py-spy, which reads it as it is, can dump it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace elasticrun::agent {

// The signal the SDK registers faulthandler on: SIGRTMIN+4, which neither
// CPython, torch nor gloo uses.
int stack_signal();

// One worker whose stack is wanted.
struct StackTarget {
  int local_rank = 0;
  pid_t pid = 0;
  bool registered = false;  // kFlagStacks: it dumps on stack_signal()
  std::string file;         // where the stacks go
};

struct StackResult {
  int local_rank = 0;
  pid_t pid = 0;
  bool stopped = false;  // it was stopped (state T) when the fault was found
  std::string how;       // "faulthandler", "py-spy", or why there is none
  // faulthandler: the stacks file's size when the signal went out; the
  // dump is in once the file grew past it and stopped growing.
  int64_t size_before = -1;
};

// Asks for every target's stacks and returns within `budget` (py-spy runs
// in parallel; faulthandler answers in about a millisecond, but the caller
// should give it a moment before it signals the worker to stop). `path`:
// the workers' PATH, where py-spy is looked for. Blocking, by design: the
// attempt is being torn down and this is its last look.
std::vector<StackResult> capture_stacks(const std::vector<StackTarget>& targets,
                                        const std::string& path, std::chrono::milliseconds budget);

// Whether every faulthandler dump of `results` is written: each file grew
// past its size_before, and is the size `last_sizes` saw a moment ago (the
// handler writes thread by thread). Updates last_sizes.
bool faulthandler_dumps_written(const std::vector<StackResult>& results,
                                const std::vector<std::string>& files,
                                std::vector<int64_t>& last_sizes);

// Whether a process is stopped (its state in /proc/<pid>/stat is T or t).
bool process_stopped(pid_t pid);

}  // namespace elasticrun::agent
