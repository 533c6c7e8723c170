#include "supervisor/cgroup_raw.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace elasticrun::supervisor {
namespace {

// getdents64's record; glibc declares no such type for the raw call.
struct Dirent64 {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

int open_file(int dir_fd, const char* name, int flags) {
  int fd;
  do {
    fd = ::openat(dir_fd, name, flags | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  return fd < 0 ? -errno : fd;
}

bool is_dot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

// Calls fn(name, is_dir) for every entry of dir_fd but "." and ".."; stops
// at the first nonzero result of fn and returns it. 0, or -errno of
// getdents64.
template <typename Fn>
int for_each_entry(int dir_fd, Fn fn) {
  if (::lseek(dir_fd, 0, SEEK_SET) < 0) return -errno;
  alignas(8) char buf[2048];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) return 0;
    for (long at = 0; at < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + at);
      at += d->reclen;
      if (is_dot(d->name)) continue;
      if (const int r = fn(d->name, d->type == DT_DIR); r != 0) return r;
    }
  }
}

// The same for the subdirectories only: fn(name).
template <typename Fn>
int for_each_subdir(int dir_fd, Fn fn) {
  return for_each_entry(dir_fd,
                        [&](const char* name, bool is_dir) { return is_dir ? fn(name) : 0; });
}

int remove_tree(int dir_fd, int depth) {
  if (depth >= kMaxCgroupDepth) return -EBUSY;
  // As remove_below: list again until a listing removes nothing.
  for (int pass = 0; pass < 64; ++pass) {
    int removed = 0;
    const int r = for_each_entry(dir_fd, [&](const char* name, bool is_dir) {
      if (is_dir) {
        const int sub = open_file(dir_fd, name, O_RDONLY | O_DIRECTORY);
        if (sub >= 0) {
          remove_tree(sub, depth + 1);
          ::close(sub);
        }
      }
      if (::unlinkat(dir_fd, name, is_dir ? AT_REMOVEDIR : 0) == 0) ++removed;
      return 0;
    });
    if (r < 0) return r;
    if (removed == 0) return 0;
  }
  return -EBUSY;
}

int kill_listed(int dir_fd, int depth) {
  int signalled = 0;
  const int procs = open_file(dir_fd, "cgroup.procs", O_RDONLY);
  if (procs < 0) return procs;
  char buf[1024];
  long pid = -1;  // the digits read so far, across reads
  for (;;) {
    const ssize_t n = ::read(procs, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = (pid < 0 ? 0 : pid * 10) + (buf[i] - '0');
      } else if (pid >= 0) {
        if (pid > 0 && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++signalled;
        pid = -1;
      }
    }
  }
  if (pid > 0 && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++signalled;
  ::close(procs);
  if (depth >= kMaxCgroupDepth) return signalled;
  for_each_subdir(dir_fd, [&](const char* name) {
    const int sub = open_file(dir_fd, name, O_RDONLY | O_DIRECTORY);
    if (sub < 0) return 0;  // removed meanwhile
    const int r = kill_listed(sub, depth + 1);
    ::close(sub);
    if (r > 0) signalled += r;
    return 0;
  });
  return signalled;
}

int remove_below(int dir_fd, int depth) {
  if (depth >= kMaxCgroupDepth) return -EBUSY;
  // Removing entries while listing them may skip some: list again until a
  // listing removes nothing. Each pass removes one at least, or ends; the
  // bound is for a cgroup whose processes make new cgroups as fast.
  for (int pass = 0; pass < 64; ++pass) {
    int removed = 0;
    int failed = 0;
    const int r = for_each_subdir(dir_fd, [&](const char* name) {
      const int sub = open_file(dir_fd, name, O_RDONLY | O_DIRECTORY);
      if (sub >= 0) {
        remove_below(sub, depth + 1);
        ::close(sub);
      }
      if (::unlinkat(dir_fd, name, AT_REMOVEDIR) == 0) {
        ++removed;
      } else if (errno != ENOENT && failed == 0) {
        failed = -errno;
      }
      return 0;
    });
    if (r < 0) return r;
    if (removed == 0) return failed;
  }
  return -EBUSY;
}

}  // namespace

int cgroup_write_kill(int dir_fd) {
  const int fd = open_file(dir_fd, "cgroup.kill", O_WRONLY);
  if (fd < 0) return fd;
  ssize_t n;
  do {
    n = ::write(fd, "1", 1);
  } while (n < 0 && errno == EINTR);
  const int err = n == 1 ? 0 : -errno;
  ::close(fd);
  return err;
}

int remove_tree_below(int dir_fd) {
  return remove_tree(dir_fd, 0);
}

int cgroup_kill_listed(int dir_fd) {
  return kill_listed(dir_fd, 0);
}

int cgroup_populated(int dir_fd) {
  const int fd = open_file(dir_fd, "cgroup.events", O_RDONLY);
  if (fd < 0) return fd;
  char buf[256];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  const int err = n < 0 ? -errno : 0;
  ::close(fd);
  if (n < 0) return err;
  // "populated 0\nfrozen 0\n": the digit after the key at a line's start.
  static constexpr char kKey[] = "populated ";
  constexpr ssize_t kLen = sizeof(kKey) - 1;
  for (ssize_t line = 0; line + kLen < n;) {
    bool match = true;
    for (ssize_t i = 0; i < kLen && match; ++i) match = buf[line + i] == kKey[i];
    if (match) return buf[line + kLen] == '0' ? 0 : 1;
    while (line < n && buf[line] != '\n') ++line;
    ++line;
  }
  return -EPROTO;
}

int cgroup_remove_below(int dir_fd) {
  return remove_below(dir_fd, 0);
}

}  // namespace elasticrun::supervisor
