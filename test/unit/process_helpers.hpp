// Helpers for tests that start real processes: descriptors and children that
// clean up after a failed assertion, bounded polls, small file I/O.
//
// Every wait is a bounded poll (kChildPatience). It is a bound, not a
// measurement: it only turns a hang into a failure with a message.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "supervisor/spawn.hpp"

namespace elasticrun::test {

inline constexpr std::chrono::seconds kChildPatience{30};
inline const std::string kPath = "PATH=/usr/local/bin:/usr/bin:/bin";

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

inline int open_append(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + strerror(errno));
  return fd;
}

// Polls pred until it holds or kChildPatience has passed.
template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kChildPatience;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// True once pid no longer runs: it is gone, or it is a zombie that its parent
// (init, for a reparented grandchild) has not collected yet.
inline bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;  // vanished meanwhile
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// A pid written by a script (echo $! > f.tmp && mv f.tmp f), once it is there.
inline std::optional<pid_t> read_pid_file(const std::string& path) {
  if (!eventually([&] { return std::ifstream(path).good(); })) return std::nullopt;
  return static_cast<pid_t>(std::stol(slurp(path)));
}

// Kills a process this test does not parent (a worker's child) and whatever
// is left of its process group on scope exit, so that no sleep outlives the
// test holding its stdout.
class Stray {
 public:
  Stray(pid_t pid, pid_t pgid) : pid_(pid), pgid_(pgid) {}
  ~Stray() {
    // ESRCH when the group is already empty: a group id is not reused while
    // the group has members.
    if (pgid_ > 0) ::kill(-pgid_, SIGKILL);
    if (pid_ > 0 && !process_gone(pid_)) ::kill(pid_, SIGKILL);
  }
  Stray(const Stray&) = delete;
  Stray& operator=(const Stray&) = delete;

 private:
  pid_t pid_;
  pid_t pgid_;
};

// A direct child: kill()ed and reaped on scope exit unless already reaped.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }

  // Reaps the child; its wait status, or nothing if it did not exit in time.
  std::optional<int> wait() {
    int status = 0;
    pid_t got = -1;
    bool done = eventually([&] {
      got = ::waitpid(pid_, &status, WNOHANG);
      return got == pid_ || (got < 0 && errno != EINTR);
    });
    if (!done || got != pid_) return std::nullopt;
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

inline std::optional<int> exit_code(const std::optional<int>& status) {
  if (!status || !WIFEXITED(*status)) return std::nullopt;
  return WEXITSTATUS(*status);
}

inline std::optional<int> term_signal(const std::optional<int>& status) {
  if (!status || !WIFSIGNALED(*status)) return std::nullopt;
  return WTERMSIG(*status);
}

// `/bin/sh -c script` with env (by default only kPath).
inline supervisor::SpawnSpec shell(const std::string& script,
                                   std::vector<std::string> env = {kPath}) {
  supervisor::SpawnSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.env = std::move(env);
  return s;
}

// No child of this process is left, running or zombie.
inline bool no_children_left() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

}  // namespace elasticrun::test
