#include "supervisor/worker_group.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

namespace elasticrun::supervisor {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
}

std::string WorkerExit::describe() const {
  if (term_signal != 0) {
    return "signal " + std::to_string(term_signal) + " (" + signal_name(term_signal) + ")";
  }
  return "exitcode " + std::to_string(exit_code);
}

util::Status WorkerGroup::start(const std::vector<SpawnSpec>& specs) {
  workers_.clear();
  exits_.clear();
  for (size_t i = 0; i < specs.size(); ++i) {
    auto pid = spawn(specs[i]);
    if (!pid.is_ok()) {
      signal_all(SIGKILL);
      for (auto& w : workers_) {
        while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        w.exited = true;
      }
      forget();
      return util::Status(pid.status().err(),
                          "local rank " + std::to_string(i) + ": " + pid.status().context());
    }
    workers_.push_back(Worker{pid.value(), false});
    if (watch_) watch_->add(pid.value());
  }
  return util::Status::ok();
}

std::vector<WorkerExit> WorkerGroup::reap() {
  std::vector<WorkerExit> out;
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;  // none left to collect now, or no children at all
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (w.pid != pid || w.exited) continue;
      w.exited = true;
      WorkerExit e;
      e.local_rank = static_cast<int>(i);
      e.pid = pid;
      e.when = std::chrono::system_clock::now();
      if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) e.term_signal = WTERMSIG(status);
      out.push_back(e);
      exits_.push_back(e);
      break;
    }
    // Anything else was an orphaned grandchild or a helper: reaping it is
    // all it needs (as PID 1 in a container, this is what clears zombies).
  }
  return out;
}

void WorkerGroup::signal_all(int sig) {
  for (const auto& w : workers_) {
    // ESRCH: the group is empty. Nothing else can go wrong for our own children.
    ::kill(-w.pid, sig);
  }
}

size_t WorkerGroup::running() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w.exited ? 0 : 1;
  return n;
}

void WorkerGroup::forget() {
  if (watch_) {
    for (const auto& w : workers_) watch_->remove(w.pid);
  }
}

}  // namespace elasticrun::supervisor
