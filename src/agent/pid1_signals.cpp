#include "agent/pid1_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "supervisor/removals.hpp"

namespace elasticrun::agent {
namespace {

// Set once, before any handler may read it; never freed (a handler may run
// until the process is gone).
std::atomic<const supervisor::Removals*> doomed{nullptr};

void end_now(int sig) {
  // Async-signal-safe only. A process that is not PID 1 never gets here.
  char msg[] = "elasticrun: signal NN with no workers running: exiting as PID 1\n";
  msg[19] = static_cast<char>('0' + sig / 10 % 10);
  msg[20] = static_cast<char>('0' + sig % 10);
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  if (const supervisor::Removals* r = doomed.load()) r->remove_all();
  ::_exit(128 + sig);
}

}  // namespace

void end_on_signals_as_pid1(const std::vector<int>& signals) {
  if (::getpid() != 1) return;
  struct sigaction a {};
  a.sa_handler = &end_now;
  ::sigemptyset(&a.sa_mask);
  for (int sig : signals) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) continue;
    ::sigaction(sig, &a, nullptr);
  }
}

void remove_as_pid1_ends(const std::vector<std::string>& paths) {
  if (::getpid() != 1 || doomed.load() != nullptr) return;
  doomed.store(new supervisor::Removals(paths));
}

}  // namespace elasticrun::agent
