#include "supervisor/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace elasticrun::supervisor {
namespace {

// Between fork and exec only async-signal-safe calls are allowed: no
// allocation, no locks, no logging. Errors go to the parent as (step, errno).
struct ChildError {
  int step;
  int err;
};

enum Step : int { kSetpgid = 1, kSignals, kDeathSignal, kOrphaned, kDup, kChdir, kExec };

const char* step_name(int step) {
  switch (step) {
    case kSetpgid:
      return "setsid";
    case kSignals:
      return "resetting signals";
    case kDeathSignal:
      return "prctl(PR_SET_PDEATHSIG)";
    case kOrphaned:
      return "checking the parent";
    case kDup:
      return "redirecting standard streams";
    case kChdir:
      return "chdir";
    default:
      return "exec";
  }
}

[[noreturn]] void child_fail(int pipe_fd, int step) {
  ChildError e{step, errno};
  ssize_t ignored = ::write(pipe_fd, &e, sizeof(e));
  (void)ignored;
  ::_exit(127);
}

void close_other_fds(int keep) {
  // close_range(2) is Linux 5.9+; fall back to a loop on older kernels.
#ifdef SYS_close_range
  if (keep > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(keep - 1), 0u);
  if (::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0u, 0u) == 0) return;
#endif
  long max = ::sysconf(_SC_OPEN_MAX);
  for (int fd = 3; fd < max && fd < 65536; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

}  // namespace

util::Result<pid_t> spawn(const SpawnSpec& spec) {
  auto pending = start_spawn(spec);
  if (!pending.is_ok()) return pending.status();
  return finish_spawn(pending.value());
}

util::Result<PendingSpawn> start_spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return util::Status(EINVAL, "spawn: empty command");
  // Everything the child needs is prepared before fork: it may not allocate.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return util::Status(errno, "spawn: pipe2");

  // Block every signal across fork so that no handler of ours runs in the
  // child before it resets dispositions, and the parent's process table
  // update below is not interrupted by SIGCHLD handling.
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    // A session of its own, as torchrun's start_new_session: its own process
    // group (pgid = pid) and no controlling terminal, so a Ctrl-C reaches
    // the agent only and the agent decides what the workers get.
    if (::setsid() < 0) child_fail(report[1], kSetpgid);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig == SIGKILL || sig == SIGSTOP) continue;
      ::signal(sig, SIG_DFL);  // fails harmlessly for the RT signals glibc reserves
    }
    sigset_t none;
    ::sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) child_fail(report[1], kSignals);
    if (spec.parent_death_signal != 0) {
      if (::prctl(PR_SET_PDEATHSIG, spec.parent_death_signal) != 0) {
        child_fail(report[1], kDeathSignal);
      }
      // The parent may have died between fork and prctl: then nobody will
      // signal us, so act as if it had.
      if (::getppid() != parent) {
        errno = ESRCH;
        child_fail(report[1], kOrphaned);
      }
    }
    const int fds[3] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
    for (int target = 0; target < 3; ++target) {
      if (fds[target] >= 0 && fds[target] != target && ::dup2(fds[target], target) < 0) {
        child_fail(report[1], kDup);
      }
    }
    close_other_fds(report[1]);
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) child_fail(report[1], kChdir);
    ::execvpe(argv[0], argv.data(), envp.data());
    child_fail(report[1], kExec);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    return util::Status(fork_errno, "spawn " + spec.argv[0] + ": fork");
  }
  // No setpgid from this side: it would make the child a group leader and
  // its setsid() fail. The group exists once finish_spawn() returns.
  return PendingSpawn{pid, report[0], spec.argv[0]};
}

util::Result<pid_t> finish_spawn(PendingSpawn& pending) {
  const pid_t pid = pending.pid;
  ChildError e{};
  ssize_t n;
  do {
    n = ::read(pending.report_fd, &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  ::close(pending.report_fd);
  pending.report_fd = -1;
  if (n == static_cast<ssize_t>(sizeof(e))) {
    // The child is exiting with 127 right after its report: collect it here so
    // that a failed spawn leaves no zombie for the caller to account for.
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return util::Status(e.err, "spawn " + pending.program + ": " + step_name(e.step));
  }
  return pid;
}

util::Status become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    return util::Status(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  return util::Status::ok();
}

}  // namespace elasticrun::supervisor
