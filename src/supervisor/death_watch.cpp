#include "supervisor/death_watch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace elasticrun::supervisor {
namespace {

constexpr int kMaxGroups = 65536;

// Runs in the forked child: only async-signal-safe calls from here on.
[[noreturn]] void watch(int read_fd) {
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  static pid_t groups[kMaxGroups];
  int count = 0;
  int32_t msg;
  for (;;) {
    ssize_t n = ::read(read_fd, &msg, sizeof(msg));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(msg))) break;  // EOF: the agent is gone
    if (msg > 0) {
      if (count < kMaxGroups) groups[count++] = msg;
    } else {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -msg) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

util::Status DeathWatch::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return util::Status(errno, "death watch: pipe2");
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return util::Status(err, "death watch: fork");
  }
  if (pid == 0) {
    ::close(fds[1]);
    // Close everything else we inherited, in particular other write ends
    // that would keep the pipe open (none today, but cheap insurance).
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != fds[0]) ::close(fd);
    }
    watch(fds[0]);
  }
  ::close(fds[0]);
  pid_ = pid;
  write_fd_ = fds[1];
  return util::Status::ok();
}

void DeathWatch::add(pid_t pgid) {
  if (write_fd_ < 0 || pgid <= 0) return;
  int32_t msg = pgid;
  // A 4-byte write to a pipe is atomic; failure means the watch died, which
  // the agent learns from SIGCHLD.
  while (::write(write_fd_, &msg, sizeof(msg)) < 0 && errno == EINTR) {
  }
}

void DeathWatch::remove(pid_t pgid) {
  if (write_fd_ < 0 || pgid <= 0) return;
  int32_t msg = -pgid;
  while (::write(write_fd_, &msg, sizeof(msg)) < 0 && errno == EINTR) {
  }
}

DeathWatch::~DeathWatch() {
  if (write_fd_ >= 0) ::close(write_fd_);
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace elasticrun::supervisor
