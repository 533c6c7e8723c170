// PID 1 of a PID namespace (a container's entrypoint, elasticrun without an
// init shim) is sent only the signals it has a handler for: the kernel
// drops the others, default action or not. While an attempt runs the
// agent handles --signals-to-handle (handled_signals.hpp); between
// attempts, as it waits in the rendezvous, it has no handler, so as PID 1
// a `docker stop` or a pod's deletion would be ignored until the runtime's
// SIGKILL.
#pragma once

#include <string>
#include <vector>

namespace elasticrun::agent {

// As PID 1, makes each of `signals` end the agent as its default action
// would elsewhere: it exits 128 + the signal (what a shell reports for a
// process the signal killed, and torchrun's status). Elsewhere it does
// nothing, so every other agent keeps the kernel's default action.
//
// libuv's signal watchers replace this handler while an attempt runs and
// leave the default action behind when they stop: call it before every
// wait outside an attempt.
void end_on_signals_as_pid1(const std::vector<int>& signals);

// As PID 1, what such a signal's exit removes first (the agent's files in
// /dev/shm: no destructor runs, and the death watch dies with the PID
// namespace); absolute paths, as supervisor::Removals takes them. Call it
// once, before the first wait. Elsewhere it does nothing: the death watch
// removes them.
void remove_as_pid1_ends(const std::vector<std::string>& paths);

}  // namespace elasticrun::agent
