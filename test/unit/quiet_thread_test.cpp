// util::start_quiet_thread: the thread blocks the signals the agent's loop
// owns, keeps those a fault raises, and passes the mask to its own threads;
// the caller's mask is left as it was.
#include "util/quiet_thread.hpp"

#include <pthread.h>
#include <signal.h>

#include <catch2/catch.hpp>

namespace {

sigset_t current_mask() {
  sigset_t m;
  pthread_sigmask(SIG_SETMASK, nullptr, &m);
  return m;
}

}  // namespace

TEST_CASE("a quiet thread takes no process-directed signal but keeps the fault signals",
          "[quiet_thread]") {
  const sigset_t before = current_mask();
  sigset_t inside{}, grandchild{};
  auto t = elasticrun::util::start_quiet_thread([&] {
    inside = current_mask();
    std::thread([&] { grandchild = current_mask(); }).join();
  });
  t.join();
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGPIPE}) {
    CHECK(sigismember(&inside, sig) == 1);
    CHECK(sigismember(&grandchild, sig) == 1);
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) {
    CHECK(sigismember(&inside, sig) == 0);
  }
  const sigset_t after = current_mask();
  for (int sig = 1; sig < SIGRTMIN; ++sig) {
    CHECK(sigismember(&after, sig) == sigismember(&before, sig));
  }
}
