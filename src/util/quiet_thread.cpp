#include "util/quiet_thread.hpp"

#include <pthread.h>

#include <csignal>

namespace elasticrun::util {

std::thread start_quiet_thread(std::function<void()> f) {
  sigset_t quiet, old;
  sigfillset(&quiet);
  for (int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&quiet, sync);
  pthread_sigmask(SIG_SETMASK, &quiet, &old);
  std::thread t(std::move(f));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

}  // namespace elasticrun::util
