#include "supervisor/worker_group.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>

#include "util/signals.hpp"

namespace elasticrun::supervisor {

std::string signal_name(int sig) {
  auto name = util::signal_name(sig);
  return name ? std::string(*name) : std::to_string(sig);
}

std::string WorkerExit::describe() const {
  if (term_signal != 0) {
    return "signal " + std::to_string(term_signal) + " (" + signal_name(term_signal) + ")";
  }
  return "exitcode " + std::to_string(exit_code);
}

util::Status WorkerGroup::start(const std::vector<SpawnSpec>& specs,
                                const std::vector<pid_t>& running) {
  workers_.clear();
  exits_.clear();
  auto adopted = [&](size_t i) { return i < running.size() && running[i] > 0 ? running[i] : 0; };
  // Fork every worker first, then wait for their execs: the workers start in
  // parallel, which is most of a restart's latency on a many-GPU node.
  std::vector<PendingSpawn> pending(specs.size());
  util::Status failure;
  size_t failed_rank = 0;
  size_t started = 0;
  for (; started < specs.size(); ++started) {
    if (adopted(started)) continue;
    auto p = start_spawn(specs[started]);
    if (!p.is_ok()) {
      failure = p.status();
      failed_rank = started;
      break;
    }
    pending[started] = std::move(p).value();
  }
  // Every child's pid is its process group's id: tell the death watch about
  // all of them at once, before their execs, in one message.
  std::vector<pid_t> pgids;
  pgids.reserve(specs.size());
  for (size_t i = 0; i < started; ++i) pgids.push_back(adopted(i) ? adopted(i) : pending[i].pid);
  if (watch_) watch_->add(pgids);
  for (size_t i = 0; i < started; ++i) {
    if (adopted(i)) {
      workers_.push_back(Worker{adopted(i), false});
      continue;
    }
    auto pid = finish_spawn(pending[i]);
    if (pid.is_ok()) {
      workers_.push_back(Worker{pid.value(), false});
    } else if (failure.is_ok()) {
      failure = pid.status();
      failed_rank = i;
    }
  }
  if (failure.is_ok()) return failure;
  signal_all(SIGKILL);
  for (auto& w : workers_) {
    while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    w.exited = true;
  }
  // The children whose exec failed were reaped by finish_spawn: their pids
  // are free for others to take, so they leave the watch with the rest.
  if (watch_) watch_->remove(pgids);
  workers_.clear();
  return util::Status(failure.err(),
                      "local rank " + std::to_string(failed_rank) + ": " + failure.context());
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
  for (size_t r = 0; r < workers_.size(); ++r) signal_group(static_cast<int>(r), sig);
}

void WorkerGroup::signal_group(int local_rank, int sig) {
  // ESRCH: the group is empty. Nothing else can go wrong for our own children.
  ::kill(-workers_.at(static_cast<size_t>(local_rank)).pid, sig);
}

void WorkerGroup::signal_one(int local_rank, int sig) {
  const Worker& w = workers_.at(static_cast<size_t>(local_rank));
  // Not reaped yet means the pid is still ours (a zombie at worst).
  if (!w.exited) ::kill(w.pid, sig);
}

size_t WorkerGroup::running() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w.exited ? 0 : 1;
  return n;
}

void WorkerGroup::forget() {
  if (!watch_) return;
  std::vector<pid_t> pgids;
  pgids.reserve(workers_.size());
  for (const auto& w : workers_) pgids.push_back(w.pid);
  watch_->remove(pgids);
}

}  // namespace elasticrun::supervisor
