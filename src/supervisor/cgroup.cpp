#include "supervisor/cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "supervisor/cgroup_raw.hpp"

namespace elasticrun::supervisor {
namespace {

// mountinfo writes space, tab, newline and backslash in paths as \ooo.
std::string unescape_mount_path(const std::string& s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> split_spaces(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string field; in >> field;) out.push_back(field);
  return out;
}

std::string random_hex(int digits) {
  std::mt19937_64 rng(std::random_device{}());
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < digits; ++i) s += kHex[rng() % 16];
  return s;
}

}  // namespace

util::Result<std::string> own_cgroup_dir(const std::string& proc_root) {
  std::ifstream cgroup(proc_root + "/self/cgroup");
  if (!cgroup) return util::Status(ENOENT, "reading " + proc_root + "/self/cgroup");
  std::string own;
  for (std::string line; std::getline(cgroup, line);) {
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  }
  if (own.empty() || own[0] != '/') {
    return util::Status(ENOENT, "no cgroup v2 in " + proc_root + "/self/cgroup (cgroup v1 only)");
  }
  std::ifstream mountinfo(proc_root + "/self/mountinfo");
  if (!mountinfo) return util::Status(ENOENT, "reading " + proc_root + "/self/mountinfo");
  bool mounted = false;
  for (std::string line; std::getline(mountinfo, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    const auto f = split_spaces(line);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || dash + 1 == f.end() || *(dash + 1) != "cgroup2") {
      continue;
    }
    mounted = true;
    const std::string root = unescape_mount_path(f[3]);
    const std::string point = unescape_mount_path(f[4]);
    // The mount shows the part of the hierarchy below root: our cgroup must be in it.
    std::string rest;
    if (root == "/") {
      rest = own;
    } else if (own.rfind(root, 0) == 0 && (own.size() == root.size() || own[root.size()] == '/')) {
      rest = own.substr(root.size());
    } else {
      continue;
    }
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    return point + rest;
  }
  if (!mounted) return util::Status(ENOENT, "no cgroup2 file system is mounted");
  return util::Status(ENOENT, "no cgroup2 mount shows this process's cgroup " + own);
}

util::Status move_to_cgroup(int procs_fd, pid_t pid) {
  const std::string text = std::to_string(pid);
  ssize_t n;
  do {
    n = ::write(procs_fd, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(text.size())) {
    return util::Status(n < 0 ? errno : EIO, "moving pid " + text + " into a cgroup");
  }
  return util::Status::ok();
}

Cgroup::Cgroup(Cgroup&& other) noexcept
    : path_(std::move(other.path_)),
      dir_fd_(std::exchange(other.dir_fd_, -1)),
      procs_fd_(std::exchange(other.procs_fd_, -1)) {
  other.path_.clear();
}

Cgroup& Cgroup::operator=(Cgroup&& other) noexcept {
  if (this != &other) {
    kill();
    remove();
    close_fds();
    path_ = std::exchange(other.path_, {});
    dir_fd_ = std::exchange(other.dir_fd_, -1);
    procs_fd_ = std::exchange(other.procs_fd_, -1);
  }
  return *this;
}

Cgroup::~Cgroup() {
  kill();
  remove();
  close_fds();
}

void Cgroup::close_fds() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  procs_fd_ = dir_fd_ = -1;
}

util::Result<Cgroup> Cgroup::open_new(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) return util::Status(errno, "creating cgroup " + path);
  Cgroup cg;
  cg.path_ = path;
  cg.dir_fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg.dir_fd_ >= 0) cg.procs_fd_ = ::openat(cg.dir_fd_, "cgroup.procs", O_WRONLY | O_CLOEXEC);
  if (cg.procs_fd_ < 0) {
    const int err = errno;
    cg.close_fds();
    ::rmdir(path.c_str());
    return util::Status(err, "opening " + path + "/cgroup.procs");
  }
  return cg;
}

util::Result<Cgroup> Cgroup::create_job(const std::string& proc_root) {
  auto own = own_cgroup_dir(proc_root);
  if (!own.is_ok()) return own.status();
  auto made =
      open_new(own.value() + "/elasticrun-" + std::to_string(::getpid()) + "-" + random_hex(8));
  if (!made.is_ok()) return made.status();
  Cgroup cg = std::move(made).value();
  // Creating a cgroup proves less than joining one: moving a process needs
  // write access to cgroup.procs here and in the common ancestor (our own
  // cgroup), which a delegated subtree may not give. So a child tries.
  const pid_t probe = ::fork();
  if (probe < 0) return util::Status(errno, "fork (trying cgroup " + cg.path() + ")");
  if (probe == 0) {
    // Only async-signal-safe calls: another thread may hold any lock.
    const ssize_t n = ::write(cg.procs_fd(), "0", 1);
    ::_exit(n == 1 ? 0 : (errno > 0 && errno < 256 ? errno : EIO));
  }
  int status = 0;
  while (::waitpid(probe, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int err = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
    return util::Status(err, "moving a process into cgroup " + cg.path());
  }
  return cg;
}

util::Result<Cgroup> Cgroup::child(const std::string& name) const {
  if (!valid()) return util::Status(EBADF, "no cgroup to make " + name + " in");
  const std::string path = path_ + "/" + name;
  // A leftover of an attempt whose cleanup failed: empty, it can go.
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
    return util::Status(errno, "removing the leftover cgroup " + path);
  }
  return open_new(path);
}

util::Status Cgroup::add(pid_t pid) const {
  if (!valid()) return util::Status(EBADF, "no cgroup to move pid " + std::to_string(pid) + " to");
  util::Status st = move_to_cgroup(procs_fd_, pid);
  if (!st) return util::Status(st.err(), st.context() + " (" + path_ + ")");
  return st;
}

bool Cgroup::populated() const {
  return valid() && cgroup_populated(dir_fd_) == 1;
}

util::Status Cgroup::kill(std::chrono::milliseconds timeout) {
  if (!valid()) return util::Status::ok();
  const int r = cgroup_write_kill(dir_fd_);
  // No cgroup.kill: before Linux 5.14, or the directory is gone (then
  // cgroup.events is gone too, and the loop ends at once).
  const bool by_pid = r == -ENOENT;
  if (r < 0 && !by_pid) return util::Status(-r, "writing " + path_ + "/cgroup.kill");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (by_pid) cgroup_kill_listed(dir_fd_);
    const int p = cgroup_populated(dir_fd_);
    if (p == 0 || p == -ENOENT) return util::Status::ok();
    if (p < 0) return util::Status(-p, "reading " + path_ + "/cgroup.events");
    if (std::chrono::steady_clock::now() > deadline) {
      return util::Status(ETIMEDOUT, "cgroup " + path_ + " still has processes " +
                                         std::to_string(timeout.count()) + " ms after SIGKILL");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

util::Status Cgroup::remove() {
  if (!valid()) return util::Status::ok();
  cgroup_remove_below(dir_fd_);
  if (::rmdir(path_.c_str()) != 0 && errno != ENOENT) {
    return util::Status(errno, "removing cgroup " + path_);
  }
  close_fds();
  path_.clear();
  return util::Status::ok();
}

}  // namespace elasticrun::supervisor
