#include "supervisor/death_watch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>

#include "supervisor/cgroup_raw.hpp"
#include "supervisor/removals.hpp"

namespace elasticrun::supervisor {
namespace {

constexpr int kMaxGroups = 65536;
// One message: a pgid to watch, or its negation to retire it.
constexpr size_t kMessageSize = sizeof(int32_t);
// Messages per write: PIPE_BUF bytes, the most one atomic write carries.
constexpr size_t kBatchBytes = PIPE_BUF;

// How long the watch tries to remove the job cgroup once it has killed it:
// its processes must exit first, and one in uninterruptible sleep takes its time.
constexpr int kRemoveTries = 500;
constexpr timespec kRemovePause{0, 10 * 1000 * 1000};

// Kills everything in the job cgroup and removes it, and the attempts'
// cgroups below it, as far as it can. Async-signal-safe.
void end_job_cgroup(int dir_fd, const char* path) {
  const bool by_pid = cgroup_write_kill(dir_fd) == -ENOENT;  // before Linux 5.14, or gone
  for (int i = 0; i < kRemoveTries; ++i) {
    if (by_pid) cgroup_kill_listed(dir_fd);
    cgroup_remove_below(dir_fd);
    if (::rmdir(path) == 0 || errno == ENOENT) return;
    ::nanosleep(&kRemovePause, nullptr);
  }
}

// Runs in the forked child: only async-signal-safe calls from here on.
[[noreturn]] void watch(int read_fd, int cgroup_fd, const char* cgroup_path,
                        const Removals& removals) {
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  static pid_t groups[kMaxGroups];
  int count = 0;
  // The agent writes whole messages of kMessageSize bytes, several at a
  // time; a read may still end inside one, so a tail is carried over.
  static char buf[kBatchBytes];
  size_t have = 0;
  for (;;) {
    ssize_t n = ::read(read_fd, buf + have, sizeof(buf) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the agent is gone
    have += static_cast<size_t>(n);
    size_t used = 0;
    for (; have - used >= kMessageSize; used += kMessageSize) {
      int32_t msg;
      std::memcpy(&msg, buf + used, kMessageSize);
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
    std::memmove(buf, buf + used, have - used);
    have -= used;
  }
  for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  if (cgroup_fd >= 0) end_job_cgroup(cgroup_fd, cgroup_path);
  removals.remove_all();
  ::_exit(0);
}

}  // namespace

util::Status DeathWatch::start(const Cgroup* job, const std::vector<std::string>& remove) {
  // The child reads these from its copy of our memory: no allocation there.
  const int cgroup_fd = job != nullptr && job->valid() ? job->dir_fd() : -1;
  const std::string cgroup_path = cgroup_fd >= 0 ? job->path() : std::string();
  // Closed here when start() returns; the child keeps its copies.
  const Removals removals(remove);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return util::Status(errno, "death watch: pipe2");
  }
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
      if (fd != fds[0] && fd != cgroup_fd && !removals.holds(fd)) ::close(fd);
    }
    watch(fds[0], cgroup_fd, cgroup_path.c_str(), removals);
  }
  ::close(fds[0]);
  pid_ = pid;
  write_fd_ = fds[1];
  return util::Status::ok();
}

void DeathWatch::add(std::span<const pid_t> pgids) {
  send(pgids, false);
}

void DeathWatch::remove(std::span<const pid_t> pgids) {
  send(pgids, true);
}

void DeathWatch::send(std::span<const pid_t> pgids, bool retire) {
  if (write_fd_ < 0) return;
  int32_t batch[kBatchBytes / kMessageSize];
  size_t n = 0;
  auto flush = [&] {
    // Writes of at most PIPE_BUF bytes to a pipe are atomic; failure means
    // the watch died, which the agent learns from SIGCHLD.
    while (n > 0 && ::write(write_fd_, batch, n * kMessageSize) < 0 && errno == EINTR) {
    }
    n = 0;
  };
  for (pid_t pgid : pgids) {
    if (pgid <= 0) continue;
    batch[n++] = retire ? -pgid : pgid;
    if (n == std::size(batch)) flush();
  }
  flush();
}

DeathWatch::~DeathWatch() {
  if (write_fd_ >= 0) ::close(write_fd_);
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace elasticrun::supervisor
