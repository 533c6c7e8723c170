#include "agent/host_discovery.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "agent/worker_env.hpp"
#include "elasticrun/errors.hpp"
#include "supervisor/spawn.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"
#include "util/strings.hpp"

namespace elasticrun::agent {
namespace {

using Millis = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A script's output past this is not a host list.
constexpr size_t kMaxOutput = 1 << 20;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A close-on-exec pipe whose ends are above fd 3 (spawn's extra_fd rule).
std::pair<int, int> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  for (int& fd : p) {
    if (fd > 3) continue;
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 4);
    ::close(fd);
    if (moved < 0) throw Error(std::string("fcntl: ") + std::strerror(errno));
    fd = moved;
  }
  return {p[0], p[1]};
}

// Reads what is there; false at end of file.
bool drain(int fd, std::string& into) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      if (into.size() > kMaxOutput) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

std::string names(const rendezvous::HostList& list) {
  std::string out;
  for (const auto& h : list.hosts) {
    out += (out.empty() ? "" : ", ") + h.host;
    if (h.slots) out += ":" + std::to_string(*h.slots);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

rendezvous::HostList run_discovery_script(const std::string& script, Millis timeout,
                                          const std::atomic<bool>* cancel) {
  auto [out_r, out_w] = make_pipe();
  Fd out_read(out_r), out_write(out_w);
  auto [st_r, st_w] = make_pipe();
  Fd status_read(st_r), status_write(st_w);
  Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));

  // The shell reports the script's exit status on fd 3: the agent's reaper
  // (supervisor::WorkerGroup::reap, waitpid(-1)) may collect the shell
  // itself before we do, and its status with it.
  supervisor::SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "\"$0\"; echo $? >&3", script};
  spec.env = to_envp(current_environment());
  spec.stdin_fd = null_in.get();
  spec.stdout_fd = out_write.get();
  spec.extra_fd = status_write.get();
  auto pid = supervisor::spawn(spec);
  if (!pid.is_ok()) throw Error("cannot start it: " + pid.status().message());
  out_write.reset();
  status_write.reset();
  for (int fd : {out_read.get(), status_read.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  std::string output, status;
  bool out_open = true, status_open = true;
  const auto deadline = Clock::now() + timeout;
  std::string failure;
  while (out_open || status_open) {
    if (cancel && cancel->load()) {
      failure = "cancelled";
      break;
    }
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() <= 0) {
      failure = "no answer within " + util::seconds_text(timeout);
      break;
    }
    pollfd fds[2] = {{out_open ? out_read.get() : -1, POLLIN, 0},
                     {status_open ? status_read.get() : -1, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (n < 0 && errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));
    if (out_open && fds[0].revents) out_open = drain(out_read.get(), output);
    if (status_open && fds[1].revents) status_open = drain(status_read.get(), status);
    if (output.size() > kMaxOutput) {
      failure = "it printed more than 1 MiB";
      break;
    }
  }
  if (!failure.empty()) ::kill(-pid.value(), SIGKILL);
  // ECHILD: the agent's reaper collected it; its status came on fd 3.
  while (::waitpid(pid.value(), nullptr, 0) < 0 && errno == EINTR) {
  }
  if (!failure.empty()) {
    if (failure.starts_with("no answer")) throw TimeoutError(failure);
    throw Error(failure);
  }
  while (!status.empty() && (status.back() == '\n' || status.back() == ' ')) status.pop_back();
  int code = -1;
  auto [p, ec] = std::from_chars(status.data(), status.data() + status.size(), code);
  if (status.empty() || ec != std::errc() || p != status.data() + status.size()) {
    throw Error("it ended without an exit status (killed by a signal?)");
  }
  if (code == 127) throw Error("exit status 127 (not found, or not executable?)");
  if (code != 0) throw Error("exit status " + std::to_string(code));
  return rendezvous::HostList::parse(output);
}

HostDiscovery::HostDiscovery(HostDiscoveryOptions options) : options_(std::move(options)) {
  thread_ = util::start_quiet_thread([this] { run(); });
}

HostDiscovery::~HostDiscovery() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<rendezvous::HostList> HostDiscovery::current() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!last_run_ || Clock::now() - *last_run_ >= options_.interval) {
    wanted_ = true;
    cv_.notify_all();
  }
  if (runs_ == 0) {
    // The first answer is worth waiting for, a while: without it the
    // rendezvous has only what other agents published. Not for as long as
    // a hung script may take, which would hold up a new leader's watch.
    cv_.wait_for(lock, std::min<std::chrono::milliseconds>(options_.timeout, kFirstWait),
                 [&] { return runs_ > 0 || stop_.load(); });
  }
  return good_;
}

void HostDiscovery::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return wanted_ || stop_.load(); });
    if (stop_.load()) return;
    wanted_ = false;
    lock.unlock();
    std::optional<rendezvous::HostList> list;
    std::string error;
    try {
      list = run_discovery_script(options_.script, options_.timeout, &stop_);
    } catch (const Error& e) {
      error = e.what();
    }
    lock.lock();
    finish_run(std::move(list), error);
    cv_.notify_all();
  }
}

// Under mu_.
void HostDiscovery::finish_run(std::optional<rendezvous::HostList> list, const std::string& error) {
  auto log = util::logger("agent");
  last_run_ = Clock::now();
  ++runs_;
  if (!list) {
    if (error != last_error_ && !stop_.load()) {
      log->warn(
          "--host-discovery-script {}: {}; {}", options_.script, error,
          good_ ? "the hosts it listed last stay in force: " + names(*good_)
                : std::string(
                      "until it answers, the list another agent published is in force, if any"));
    }
    last_error_ = error;
    return;
  }
  if (!last_error_.empty()) log->info("--host-discovery-script {} answers again", options_.script);
  last_error_.clear();
  if (!good_ || !(*good_ == *list)) {
    log->info("host discovery: {} host(s) allowed: {}", list->hosts.size(), names(*list));
  }
  good_ = std::move(list);
}

}  // namespace elasticrun::agent
