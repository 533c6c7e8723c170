// Helper threads that never take a process-directed signal.
//
// The agent's loop thread owns signals: SIGCHLD and the handled ones are
// libuv handles on it. Linux gives a process-directed signal to any thread
// that does not block it, and picks another thread whenever the loop's has
// one pending already: eight workers exiting at once would wake a helper
// (the event log's writer, the HTTP listener) for each SIGCHLD, only to
// pass it on. So every helper thread blocks them all, except the signals a
// fault raises in the thread itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGTRAP, SIGSYS): blocked, the kernel would take their handlers away
// (a sanitizer's, faulthandler's) and kill the process outright.
#pragma once

#include <functional>
#include <thread>

namespace elasticrun::util {

// Runs f on a new thread with every signal blocked but those above. A
// thread it starts inherits the mask.
std::thread start_quiet_thread(std::function<void()> f);

}  // namespace elasticrun::util
