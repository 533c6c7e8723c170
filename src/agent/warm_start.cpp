#include "agent/warm_start.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/worker_env.hpp"
#include "supervisor/cgroup.hpp"

namespace elasticrun::agent {
namespace {

constexpr char kBootstrap[] =
#include "agent/warm_bootstrap.inc"
    ;

// An activation carries the worker's environment and argv; past this it is
// started cold rather than risk a send that waits on an interpreter still
// importing (a fresh socket's buffer holds at least this much).
constexpr size_t kMaxMessage = 64 * 1024;

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

void append_field(std::string& out, const std::string& field) {
  out += field;
  out += '\0';
}

}  // namespace

const std::string& warm_bootstrap_source() {
  static const std::string source(kBootstrap);
  return source;
}

WarmPool::WarmPool(WarmStartConfig config, std::map<std::string, std::string> env, int size,
                   std::vector<std::vector<int>> cpu_sets)
    : config_(std::move(config)),
      envp_(to_envp(env)),
      slots_(cpu_sets.empty() ? std::vector<std::vector<int>>(static_cast<size_t>(size))
                              : std::move(cpu_sets)),
      enabled_(config_.enabled) {}

WarmPool::~WarmPool() {
  for (Interpreter& w : idle_) discard(w);
}

void WarmPool::renew() {
  for (Interpreter& w : idle_) discard(w);
  idle_.clear();
  refill();
}

void WarmPool::refill() {
  std::vector<std::vector<int>> missing = slots_;
  for (const Interpreter& w : idle_) {
    const auto it = std::find(missing.begin(), missing.end(), w.cpus);
    if (it != missing.end()) missing.erase(it);
  }
  for (const auto& cpus : missing) {
    if (!enabled_) break;
    if (!start_one(cpus)) enabled_ = false;
  }
}

bool WarmPool::start_one(const std::vector<int>& cpus) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    log_->warn("--warm-start: socketpair: {}; workers start cold", std::strerror(errno));
    return false;
  }
  // spawn() wants the child's fd 3 from above 3.
  const int child_end = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  ::close(sv[1]);
  if (child_end < 0) {
    ::close(sv[0]);
    log_->warn("--warm-start: fcntl: {}; workers start cold", std::strerror(errno));
    return false;
  }
  std::string imports;
  for (const auto& m : config_.imports) imports += (imports.empty() ? "" : ",") + m;
  supervisor::SpawnSpec spec;
  spec.argv = {config_.python, "-u", "-c", warm_bootstrap_source(), imports};
  spec.env = envp_;
  spec.extra_fd = child_end;
  spec.cpu_affinity = cpus;
  auto pid = supervisor::spawn(spec);
  ::close(child_end);
  if (!pid.is_ok()) {
    ::close(sv[0]);
    log_->warn("--warm-start: cannot start {}: {}; workers start cold", config_.python,
               pid.status().message());
    return false;
  }
  Interpreter w;
  w.pid = pid.value();
  w.channel = sv[0];
  w.cpus = cpus;
  w.pidfd = pidfd_open(w.pid);
  if (w.pidfd < 0) {
    // Without a pidfd the pool could signal a recycled pid later: give up
    // on warm starts (kernels before 5.3), and on this interpreter.
    log_->warn("--warm-start: pidfd_open: {}; workers start cold", std::strerror(errno));
    ::kill(w.pid, SIGKILL);
    while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    ::close(w.channel);
    return false;
  }
  // A send never waits long on an interpreter still importing.
  timeval timeout{1, 0};
  ::setsockopt(w.channel, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  idle_.push_back(w);
  return true;
}

size_t WarmPool::wait_ready(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<pollfd> fds;
    for (const Interpreter& w : idle_) {
      if (!w.ready) fds.push_back(pollfd{w.channel, POLLIN, 0});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (fds.empty() || left.count() <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->channel != p.fd) continue;
        char byte = 0;
        if (::recv(it->channel, &byte, 1, MSG_DONTWAIT) == 1 && byte == 'R') {
          it->ready = true;
        } else {  // EOF or garbage: it died, or is not ours to trust
          discard(*it);
          idle_.erase(it);
        }
        break;
      }
    }
  }
  size_t ready = 0;
  for (const Interpreter& w : idle_) ready += w.ready ? 1 : 0;
  return ready;
}

pid_t WarmPool::activate(const supervisor::SpawnSpec& spec) {
  if (!enabled_ || spec.argv.size() <= config_.argv_offset || spec.argv[0] != config_.python) {
    return 0;
  }
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (it->cpus != spec.cpu_affinity) {
      ++it;
      continue;
    }
    Interpreter w = *it;
    it = idle_.erase(it);
    // It is still our child, unreaped, unless pidfd_send_signal says it is
    // gone: only then could its pid be someone else's by now.
    const bool alive = ::syscall(SYS_pidfd_send_signal, w.pidfd, 0, nullptr, 0) == 0;
    if (alive && spec.cgroup_fd >= 0 && !supervisor::move_to_cgroup(spec.cgroup_fd, w.pid)) {
      discard(w);
      continue;
    }
    if (alive && send(w, spec)) {
      ::close(w.channel);
      ::close(w.pidfd);
      return w.pid;
    }
    discard(w);
  }
  return 0;
}

bool WarmPool::send(const Interpreter& w, const supervisor::SpawnSpec& spec) {
  std::string body;
  append_field(body, "elasticrun-warm-1");
  append_field(body, config_.mode);
  append_field(body, spec.cwd);
  std::vector<int> fds;
  std::string streams;
  if (spec.stdout_fd >= 0) {
    fds.push_back(spec.stdout_fd);
    streams = "stdout";
  }
  if (spec.stderr_fd >= 0) {
    fds.push_back(spec.stderr_fd);
    streams += streams.empty() ? "stderr" : ",stderr";
  }
  append_field(body, streams);
  append_field(body, std::to_string(spec.argv.size()));
  append_field(body, std::to_string(config_.argv_offset));
  for (const auto& a : spec.argv) append_field(body, a);
  for (const auto& e : spec.env) append_field(body, e);
  body.pop_back();  // fields are separated, not terminated
  if (body.size() + 4 > kMaxMessage) return false;
  std::string msg(4, '\0');
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i)
    msg[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  msg += body;

  size_t sent = 0;
  while (sent < msg.size()) {
    iovec iov{msg.data() + sent, msg.size() - sent};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
    if (sent == 0 && !fds.empty()) {
      mh.msg_control = control;
      mh.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
    }
    const ssize_t k = ::sendmsg(w.channel, &mh, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      // EPIPE/ECONNRESET: it died (an import crashed it, someone killed it).
      // A partial message cannot be taken back: this one is lost either way.
      log_->info("--warm-start: interpreter {} cannot take a worker ({}); trying another", w.pid,
                 k < 0 ? std::strerror(errno) : "closed");
      return false;
    }
    sent += static_cast<size_t>(k);
  }
  return true;
}

std::vector<pid_t> WarmPool::idle_pids() const {
  std::vector<pid_t> pids;
  for (const Interpreter& w : idle_) pids.push_back(w.pid);
  return pids;
}

void WarmPool::discard(Interpreter& w) {
  // By pidfd: if an attempt's reap collected it already, this is a no-op
  // (ESRCH, ECHILD), never a signal to whoever has its pid now.
  ::syscall(SYS_pidfd_send_signal, w.pidfd, SIGKILL, nullptr, 0);
  siginfo_t info{};
  while (::waitid(P_PIDFD, static_cast<id_t>(w.pidfd), &info, WEXITED) < 0 && errno == EINTR) {
  }
  ::close(w.pidfd);
  ::close(w.channel);
  w = Interpreter{};
}

}  // namespace elasticrun::agent
