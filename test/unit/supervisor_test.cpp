// The supervisor's building blocks driven with real processes: spawn's clean
// slate, WorkerGroup's reaping and group signals, the DeathWatch that outlives
// a SIGKILLed agent, and LogPump's line handling on a real libuv loop.
//
// WorkerGroup::reap() collects *any* exited child (waitpid(-1)), so every test
// here reaps what it started before it returns; the guards below kill and reap
// on the way out of a failed assertion too. Workers are small /bin/sh scripts.
//
// Every wait is a bounded poll (kChildPatience). It is a bound, not a measurement:
// it only turns a hang into a failure with a message.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "process_helpers.hpp"
#include "supervisor/death_watch.hpp"
#include "supervisor/log_pump.hpp"
#include "supervisor/spawn.hpp"
#include "supervisor/worker_group.hpp"
#include "temp_dir.hpp"

namespace sv = elasticrun::supervisor;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using namespace elasticrun::test;  // NOLINT: test helpers

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("write: ") + strerror(errno));
    done += static_cast<size_t>(n);
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Reaps a WorkerGroup until every worker has exited; collects the exits.
std::vector<sv::WorkerExit> reap_all(sv::WorkerGroup& group) {
  std::vector<sv::WorkerExit> exits;
  eventually([&] {
    for (const auto& e : group.reap()) exits.push_back(e);
    return group.all_exited();
  });
  return exits;
}

// Kills and reaps a WorkerGroup's remaining workers on scope exit.
class GroupGuard {
 public:
  explicit GroupGuard(sv::WorkerGroup& group) : group_(group) {}
  ~GroupGuard() {
    if (group_.all_exited()) return;
    group_.signal_all(SIGKILL);
    reap_all(group_);
  }
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;

 private:
  sv::WorkerGroup& group_;
};

// A script file in dir, run by /bin/sh with dir as its working directory.
sv::SpawnSpec script_in(const TempDir& dir, const std::string& name, const std::string& text) {
  write_text(dir / name, text);
  sv::SpawnSpec s;
  s.argv = {"/bin/sh", dir / name};
  s.env = {kPath};
  s.cwd = dir.path().string();
  return s;
}

// One field ("SigBlk") of a /proc/.../status file, as a number.
uint64_t status_mask(const std::string& status_text, const std::string& field) {
  for (const auto& line : split_lines(status_text)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
  }
  throw std::runtime_error("no " + field + " in status");
}

uint64_t bit(int sig) {
  return uint64_t{1} << (sig - 1);
}

}  // namespace

// ---------------------------------------------------------------------------
// spawn

TEST_CASE("a spawned child runs the given argv with the given environment", "[supervisor]") {
  TempDir dir;
  sv::SpawnSpec s = shell(R"(printf '%s|' "$0" "$@" > "$OUT"; printf '%s' "$VAR" >> "$OUT")",
                          {"VAR=hello $world", "OUT=" + dir / "out"});
  s.argv.insert(s.argv.end(), {"zero", "one", "two words"});
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  REQUIRE(exit_code(child.wait()) == 0);
  CHECK(slurp(dir / "out") == "zero|one|two words|hello $world");
}

TEST_CASE("a spawned child's environment is exactly the one given, nothing of the parent's",
          "[supervisor]") {
  TempDir dir;
  REQUIRE(::setenv("ELASTICRUN_TEST_PARENT_ONLY", "1", 1) == 0);
  UniqueFd out(open_append(dir / "env"));
  sv::SpawnSpec s;
  s.argv = {"/usr/bin/env"};
  s.env = {"B=two words", "A=1"};
  s.stdout_fd = out.get();
  auto pid = sv::spawn(s);
  ::unsetenv("ELASTICRUN_TEST_PARENT_ONLY");
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  REQUIRE(exit_code(child.wait()) == 0);
  CHECK(slurp(dir / "env") == "B=two words\nA=1\n");
}

TEST_CASE("a spawned child's standard streams are the descriptors given", "[supervisor]") {
  TempDir dir;
  write_text(dir / "in", "the input\n");
  UniqueFd in(::open((dir / "in").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd out(open_append(dir / "out"));
  UniqueFd err(open_append(dir / "err"));
  REQUIRE(in.get() >= 0);
  sv::SpawnSpec s = shell(R"(read line; echo "got $line"; echo "to stderr" >&2)");
  s.stdin_fd = in.get();
  s.stdout_fd = out.get();
  s.stderr_fd = err.get();
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  REQUIRE(exit_code(child.wait()) == 0);
  CHECK(slurp(dir / "out") == "got the input\n");
  CHECK(slurp(dir / "err") == "to stderr\n");
}

TEST_CASE("a spawned child runs in the working directory given", "[supervisor]") {
  TempDir dir;
  sv::SpawnSpec s = shell("pwd > where");
  s.cwd = dir.path().string();
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  REQUIRE(exit_code(child.wait()) == 0);
  CHECK(slurp(dir / "where") == fs::canonical(dir.path()).string() + "\n");
}

TEST_CASE("spawning into a missing working directory fails with ENOENT from chdir",
          "[supervisor]") {
  TempDir dir;
  sv::SpawnSpec s = shell("exit 0");
  s.cwd = dir / "missing";
  auto pid = sv::spawn(s);
  REQUIRE_FALSE(pid.is_ok());
  CHECK(pid.status().err() == ENOENT);
  CHECK_THAT(pid.status().context(), Contains("chdir"));
  CHECK(no_children_left());
}

TEST_CASE("spawning an empty command fails with EINVAL", "[supervisor]") {
  auto pid = sv::spawn(sv::SpawnSpec{});
  REQUIRE_FALSE(pid.is_ok());
  CHECK(pid.status().err() == EINVAL);
}

TEST_CASE("a spawned child leads its own process group", "[supervisor]") {
  sv::SpawnSpec s;
  s.argv = {"/bin/sleep", "100"};
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  CHECK(::getpgid(child.pid()) == child.pid());
  CHECK(::getpgid(child.pid()) != ::getpgrp());
}

// torchrun starts workers with Popen(start_new_session=True) (spec section 2).
// A worker left in the launcher's session keeps its controlling terminal
// while sitting in a background process group, so a read from an interactive
// stdin (pdb, input()) stops it with SIGTTIN instead of reading.
TEST_CASE("a spawned child leads its own session, as torchrun's workers do", "[supervisor]") {
  sv::SpawnSpec s;
  s.argv = {"/bin/sleep", "100"};
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  CHECK(::getsid(child.pid()) == child.pid());
}

namespace {

// Ignores and blocks signals in the calling thread for its lifetime.
class SignalState {
 public:
  SignalState(int ignored, int blocked) : ignored_(ignored) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(ignored, &ign, &old_action_);
    sigset_t set;
    ::sigemptyset(&set);
    ::sigaddset(&set, blocked);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_mask_);
  }
  ~SignalState() {
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    ::sigaction(ignored_, &old_action_, nullptr);
  }
  SignalState(const SignalState&) = delete;
  SignalState& operator=(const SignalState&) = delete;

 private:
  int ignored_;
  struct sigaction old_action_ {};
  sigset_t old_mask_{};
};

}  // namespace

TEST_CASE("a spawned child starts with no blocked and no ignored signal whatever the parent's",
          "[supervisor]") {
  TempDir dir;
  UniqueFd out(open_append(dir / "status"));
  std::optional<elasticrun::util::Result<pid_t>> pid;
  {
    SignalState parent(SIGTERM, SIGUSR1);
    // Unless the parent really is in that state, this test proves nothing.
    const std::string mine = slurp("/proc/thread-self/status");
    REQUIRE((status_mask(mine, "SigIgn") & bit(SIGTERM)) != 0);
    REQUIRE((status_mask(mine, "SigBlk") & bit(SIGUSR1)) != 0);

    sv::SpawnSpec s;
    s.argv = {"/bin/cat", "/proc/self/status"};
    s.stdout_fd = out.get();
    pid = sv::spawn(s);
  }
  REQUIRE(pid->is_ok());
  Child child(pid->value());
  REQUIRE(exit_code(child.wait()) == 0);
  const std::string status = slurp(dir / "status");
  CHECK(status_mask(status, "SigBlk") == 0);
  CHECK(status_mask(status, "SigIgn") == 0);
}

TEST_CASE("a spawned child receives its parent-death signal when the spawning thread exits",
          "[supervisor]") {
  const int sig = GENERATE(SIGKILL, SIGTERM);
  sv::SpawnSpec s;
  s.argv = {"/bin/sleep", "100"};
  s.parent_death_signal = sig;
  pid_t pid = -1;
  std::string error;
  std::thread spawner([&] {
    auto r = sv::spawn(s);
    if (r.is_ok()) {
      pid = r.value();
    } else {
      error = r.status().message();
    }
  });
  spawner.join();
  REQUIRE(error.empty());
  REQUIRE(pid > 0);
  Child child(pid);
  // The sleep would last 100 s; the process that spawned it lives on. Only
  // the death of the spawning thread ends it, with the signal asked for.
  CHECK(term_signal(child.wait()) == sig);
}

TEST_CASE("a spawned child inherits no descriptor beyond its standard streams", "[supervisor]") {
  TempDir dir;
  // Neither is close-on-exec. The first is below the descriptors spawn opens
  // for itself, the second far above them.
  UniqueFd low(::open("/dev/null", O_RDONLY));
  REQUIRE(low.get() >= 3);
  UniqueFd high(::fcntl(low.get(), F_DUPFD, 200));
  REQUIRE(high.get() >= 200);
  REQUIRE((::fcntl(low.get(), F_GETFD) & FD_CLOEXEC) == 0);
  REQUIRE((::fcntl(high.get(), F_GETFD) & FD_CLOEXEC) == 0);

  UniqueFd out(open_append(dir / "fds"));
  const std::string l = std::to_string(low.get()), h = std::to_string(high.get());
  sv::SpawnSpec s = shell("for fd in 0 1 2 " + l + " " + h +
                          "; do if [ -e /proc/self/fd/$fd ]; then echo $fd open; "
                          "else echo $fd closed; fi; done");
  s.stdout_fd = out.get();
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  REQUIRE(exit_code(child.wait()) == 0);
  CHECK(slurp(dir / "fds") == "0 open\n1 open\n2 open\n" + l + " closed\n" + h + " closed\n");
}

TEST_CASE("spawning a program that does not exist fails with ENOENT and leaves no child",
          "[supervisor]") {
  // Absolute, and looked up in PATH.
  const std::string program = GENERATE(std::string("/nonexistent/elasticrun-no-such-program"),
                                       std::string("elasticrun-no-such-program"));
  sv::SpawnSpec s;
  s.argv = {program, "arg"};
  s.env = {kPath};
  auto pid = sv::spawn(s);
  REQUIRE_FALSE(pid.is_ok());
  CHECK(pid.status().err() == ENOENT);
  CHECK_THAT(pid.status().context(), Contains(program));
  CHECK(no_children_left());
}

// ---------------------------------------------------------------------------
// WorkerGroup

TEST_CASE("reaping a worker group reports each worker's local rank with its exit code or signal",
          "[supervisor]") {
  sv::WorkerGroup group;
  REQUIRE(group.start({shell("exit 0"), shell("exit 3"), shell("kill -9 $$")}).is_ok());
  GroupGuard guard(group);
  CHECK(group.size() == 3);
  CHECK(group.running() == 3);
  CHECK_FALSE(group.all_exited());

  std::vector<sv::WorkerExit> exits = reap_all(group);
  REQUIRE(group.all_exited());
  CHECK(group.running() == 0);
  REQUIRE(exits.size() == 3);
  REQUIRE(group.exits().size() == 3);
  for (size_t i = 0; i < exits.size(); ++i) CHECK(group.exits()[i].pid == exits[i].pid);

  std::sort(exits.begin(), exits.end(),
            [](const auto& a, const auto& b) { return a.local_rank < b.local_rank; });
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(exits[static_cast<size_t>(rank)].local_rank == rank);
    CHECK(exits[static_cast<size_t>(rank)].pid == group.pid(rank));
  }
  CHECK(exits[0].exit_code == 0);
  CHECK(exits[0].term_signal == 0);
  CHECK_FALSE(exits[0].failed());
  CHECK(exits[1].exit_code == 3);
  CHECK(exits[1].term_signal == 0);
  CHECK(exits[1].failed());
  CHECK(exits[2].term_signal == SIGKILL);
  CHECK(exits[2].failed());
  CHECK(no_children_left());
}

TEST_CASE("a worker exit describes itself by exit code or by signal number and name",
          "[supervisor]") {
  sv::WorkerExit clean;
  CHECK(clean.describe() == "exitcode 0");
  CHECK_FALSE(clean.failed());

  sv::WorkerExit code;
  code.exit_code = 3;
  CHECK(code.describe() == "exitcode 3");

  sv::WorkerExit killed;
  killed.term_signal = SIGKILL;
  CHECK(killed.describe() == "signal 9 (SIGKILL)");

  sv::WorkerExit terminated;
  terminated.term_signal = SIGTERM;
  CHECK(terminated.describe() == "signal 15 (SIGTERM)");

  CHECK(sv::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(sv::signal_name(SIGRTMIN + 1) == std::to_string(SIGRTMIN + 1));
}

TEST_CASE("a worker group that cannot start a worker stops the ones started and names the rank",
          "[supervisor]") {
  sv::SpawnSpec sleeper;
  sleeper.argv = {"/bin/sleep", "100"};
  sv::SpawnSpec missing;
  missing.argv = {"/nonexistent/elasticrun-no-such-worker"};
  sv::WorkerGroup group;
  auto status = group.start({sleeper, missing, sleeper});
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.err() == ENOENT);
  CHECK_THAT(status.context(), Contains("local rank 1"));
  CHECK_THAT(status.context(), Contains("/nonexistent/elasticrun-no-such-worker"));
  CHECK(group.running() == 0);
  // The sleeping ranks 0 and 2 were killed and reaped: nothing of ours is left.
  const bool clean = no_children_left();
  CHECK(clean);
  for (size_t i = 0; !clean && i < group.size(); ++i) {
    ::kill(-group.pid(static_cast<int>(i)), SIGKILL);
    ::waitpid(group.pid(static_cast<int>(i)), nullptr, 0);
  }
}

TEST_CASE("spawns started together each finish with their own pid or their own exec error",
          "[supervisor]") {
  TempDir dir;
  sv::SpawnSpec works = shell("echo ran > out");
  works.cwd = dir.path().string();
  sv::SpawnSpec missing;
  missing.argv = {"/nonexistent/elasticrun-no-such-program"};
  auto first = sv::start_spawn(works);
  REQUIRE(first.is_ok());
  auto second = sv::start_spawn(missing);
  REQUIRE(second.is_ok());

  // Finished in the other order: each report belongs to its own child.
  auto second_pid = sv::finish_spawn(second.value());
  REQUIRE_FALSE(second_pid.is_ok());
  CHECK(second_pid.status().err() == ENOENT);
  CHECK_THAT(second_pid.status().context(), Contains("/nonexistent/elasticrun-no-such-program"));
  auto first_pid = sv::finish_spawn(first.value());
  REQUIRE(first_pid.is_ok());
  Child child(first_pid.value());
  CHECK(first_pid.value() == first.value().pid);
  CHECK(exit_code(child.wait()) == 0);
  CHECK(slurp(dir / "out") == "ran\n");
  CHECK(no_children_left());
}

TEST_CASE("reaping collects exited children that are not workers without reporting them",
          "[supervisor]") {
  auto helper = sv::spawn(shell("exit 5"));
  REQUIRE(helper.is_ok());
  Child helper_guard(helper.value());
  // Wait for the helper to exit but leave it a zombie for reap() to find.
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(helper.value()), &info, WEXITED | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  REQUIRE(rc == 0);

  sv::WorkerGroup group;
  REQUIRE(group.start({shell("exit 0")}).is_ok());
  GroupGuard guard(group);
  auto exits = reap_all(group);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].pid == group.pid(0));
  CHECK(exits[0].local_rank == 0);
  errno = 0;
  CHECK(::waitpid(helper.value(), nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("signalling a worker group reaches what a worker forked", "[supervisor]") {
  TempDir dir;
  sv::WorkerGroup group;
  REQUIRE(group
              .start({script_in(dir, "worker.sh",
                                "sleep 100 &\n"
                                "echo $! > gc.tmp && mv gc.tmp gc\n"
                                "wait\n")})
              .is_ok());
  GroupGuard guard(group);
  auto grandchild = read_pid_file(dir / "gc");
  REQUIRE(grandchild);
  Stray stray(*grandchild, group.pid(0));
  REQUIRE_FALSE(process_gone(*grandchild));

  group.signal_all(SIGTERM);
  auto exits = reap_all(group);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].term_signal == SIGTERM);
  CHECK(eventually([&] { return process_gone(*grandchild); }));
}

TEST_CASE("signalling a worker group reaches a worker's descendants after the worker has exited",
          "[supervisor]") {
  TempDir dir;
  sv::WorkerGroup group;
  REQUIRE(group
              .start({script_in(dir, "worker.sh",
                                "sleep 100 &\n"
                                "echo $! > gc.tmp && mv gc.tmp gc\n")})
              .is_ok());
  GroupGuard guard(group);
  auto grandchild = read_pid_file(dir / "gc");
  REQUIRE(grandchild);
  Stray stray(*grandchild, group.pid(0));
  auto exits = reap_all(group);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].exit_code == 0);
  REQUIRE_FALSE(process_gone(*grandchild));

  group.signal_all(SIGKILL);
  CHECK(eventually([&] { return process_gone(*grandchild); }));
}

// ---------------------------------------------------------------------------
// DeathWatch

namespace {

// The worker forks a grandchild that has no parent-death signal of its own.
// The grandchild writes its pid once its TERM trap is in place; on SIGTERM it
// writes "alive" to ack (a SIGKILL leaves no ack).
sv::SpawnSpec worker_with_grandchild(const TempDir& dir) {
  write_text(dir / "grandchild.sh",
             "trap 'echo alive > ack; exit 0' TERM\n"
             "sleep 100 &\n"
             "echo $$ > gc.tmp && mv gc.tmp gc\n"
             "wait\n");
  return script_in(dir, "worker.sh", "/bin/sh ./grandchild.sh &\nwait\n");
}

struct AgentPids {
  int32_t watch = -1;
  int32_t worker = -1;
};

// The body of a forked stand-in agent: starts a death watch and one worker,
// retires the worker's group from the watch if asked, reports the pids, and
// waits to be killed. Never returns.
[[noreturn]] void run_agent(int report_fd, const sv::SpawnSpec& worker, bool retire) {
  sv::DeathWatch watch;
  if (!watch.start().is_ok()) ::_exit(10);
  sv::WorkerGroup group(&watch);
  if (!group.start({worker}).is_ok()) ::_exit(11);
  if (retire) group.forget();
  AgentPids pids{watch.pid(), group.pid(0)};
  if (::write(report_fd, &pids, sizeof(pids)) != static_cast<ssize_t>(sizeof(pids))) ::_exit(12);
  for (;;) ::pause();
}

// Reads the agent's report; nothing if it died or went quiet first.
std::optional<AgentPids> read_report(int fd) {
  AgentPids pids;
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(&pids);
  const auto deadline = std::chrono::steady_clock::now() + kChildPatience;
  while (got < sizeof(pids)) {
    pollfd pfd{fd, POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    if (::poll(&pfd, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, p + got, sizeof(pids) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  return pids;
}

}  // namespace

TEST_CASE("when the agent is SIGKILLed its death watch kills what the workers forked",
          "[supervisor]") {
  TempDir dir;
  const sv::SpawnSpec worker = worker_with_grandchild(dir);
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  UniqueFd report_read(report[0]);
  const pid_t agent_pid = ::fork();
  REQUIRE(agent_pid >= 0);
  if (agent_pid == 0) run_agent(report[1], worker, /*retire=*/false);
  ::close(report[1]);
  Child agent(agent_pid);

  auto pids = read_report(report_read.get());
  REQUIRE(pids);
  auto grandchild = read_pid_file(dir / "gc");
  REQUIRE(grandchild);
  Stray stray(*grandchild, pids->worker);
  REQUIRE(::getpgid(*grandchild) == pids->worker);
  REQUIRE_FALSE(process_gone(*grandchild));

  REQUIRE(::kill(agent_pid, SIGKILL) == 0);
  REQUIRE(term_signal(agent.wait()) == SIGKILL);

  // The worker dies by its parent-death signal; only the watch can reach the
  // grandchild, which has none.
  CHECK(eventually([&] { return process_gone(pids->worker); }));
  CHECK(eventually([&] { return process_gone(*grandchild); }));
  CHECK(eventually([&] { return process_gone(pids->watch); }));
  CHECK_FALSE(fs::exists(dir / "ack"));
}

TEST_CASE("a group retired from the death watch outlives the agent's death", "[supervisor]") {
  TempDir dir;
  const sv::SpawnSpec worker = worker_with_grandchild(dir);
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  UniqueFd report_read(report[0]);
  const pid_t agent_pid = ::fork();
  REQUIRE(agent_pid >= 0);
  if (agent_pid == 0) run_agent(report[1], worker, /*retire=*/true);
  ::close(report[1]);
  Child agent(agent_pid);

  auto pids = read_report(report_read.get());
  REQUIRE(pids);
  auto grandchild = read_pid_file(dir / "gc");
  REQUIRE(grandchild);
  Stray stray(*grandchild, pids->worker);

  REQUIRE(::kill(agent_pid, SIGKILL) == 0);
  REQUIRE(term_signal(agent.wait()) == SIGKILL);
  // Once the watch has exited it has done all it was going to do.
  REQUIRE(eventually([&] { return process_gone(pids->watch); }));
  CHECK(eventually([&] { return process_gone(pids->worker); }));

  // Still alive, and not merely dying: it answers SIGTERM through its trap,
  // which a pending SIGKILL would have pre-empted.
  REQUIRE(::kill(*grandchild, SIGTERM) == 0);
  CHECK(eventually([&] { return slurp(dir / "ack") == "alive\n"; }));
}

TEST_CASE("closing the death watch kills every group still registered with it", "[supervisor]") {
  auto watch = std::make_unique<sv::DeathWatch>();
  REQUIRE(watch->start().is_ok());
  CHECK(watch->running());
  CHECK(watch->pid() > 0);
  sv::SpawnSpec s;
  s.argv = {"/bin/sleep", "100"};
  sv::WorkerGroup group(watch.get());
  REQUIRE(group.start({s}).is_ok());
  GroupGuard guard(group);

  watch.reset();  // closes the pipe and waits for the watch to exit
  auto exits = reap_all(group);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].term_signal == SIGKILL);
}

TEST_CASE("a group removed from the death watch is left alone when the watch closes",
          "[supervisor]") {
  auto watch = std::make_unique<sv::DeathWatch>();
  REQUIRE(watch->start().is_ok());
  sv::SpawnSpec s;
  s.argv = {"/bin/sleep", "100"};
  sv::WorkerGroup group(watch.get());
  REQUIRE(group.start({s}).is_ok());
  GroupGuard guard(group);
  watch->remove(group.pid(0));

  watch.reset();
  // Had the watch sent SIGKILL before it exited, the worker would die of that
  // and not of the SIGTERM sent now.
  group.signal_all(SIGTERM);
  auto exits = reap_all(group);
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].term_signal == SIGTERM);
}

// The agent sends a node's groups in one call; more than PIPE_BUF bytes of
// them take several writes, and the watch may read one write in pieces.
TEST_CASE("the death watch keeps every group of a batch larger than one atomic pipe write",
          "[supervisor]") {
  auto watch = std::make_unique<sv::DeathWatch>();
  REQUIRE(watch->start().is_ok());
  sv::SpawnSpec s;
  s.argv = {"/bin/sleep", "100"};
  sv::WorkerGroup group;  // no watch of its own: the test registers its groups
  REQUIRE(group.start({s, s}).is_ok());
  GroupGuard guard(group);
  // Padding: ids above any pid_max, so no process leads such a group and the
  // watch's SIGKILL to them reaches nobody.
  std::vector<pid_t> added, removed;
  for (pid_t i = 0; i < 3000; ++i) added.push_back((pid_t{1} << 30) + i);
  removed = added;
  added.push_back(group.pid(0));
  added.push_back(group.pid(1));
  removed.push_back(group.pid(0));
  watch->add(added);
  watch->remove(removed);

  watch.reset();
  // Rank 1, still registered, died of the watch's SIGKILL; rank 0, removed
  // after 3000 others, lives until the SIGTERM sent now.
  group.signal_all(SIGTERM);
  auto exits = reap_all(group);
  REQUIRE(exits.size() == 2);
  for (const auto& e : exits) {
    INFO("local rank " << e.local_rank);
    CHECK(e.term_signal == (e.local_rank == 0 ? SIGTERM : SIGKILL));
  }
}

// ---------------------------------------------------------------------------
// LogPump

namespace {

// A libuv loop and the pumps on it. The loop is run without blocking, in
// bounded polls; finish() drains and closes every pump and runs the close
// callbacks before the pumps are destroyed, as LogPump requires.
class PumpFixture {
 public:
  explicit PumpFixture(int pumps = 1) {
    uv_loop_init(&loop_);
    for (int i = 0; i < pumps; ++i) pumps_.push_back(std::make_unique<sv::LogPump>(&loop_));
  }
  ~PumpFixture() { finish(); }
  PumpFixture(const PumpFixture&) = delete;
  PumpFixture& operator=(const PumpFixture&) = delete;

  sv::LogPump& pump(size_t i = 0) { return *pumps_.at(i); }

  template <typename Pred>
  bool run_until(Pred pred) {
    return eventually([&] {
      uv_run(&loop_, UV_RUN_NOWAIT);
      return pred();
    });
  }

  // True when the loop closed with no handle left behind. Idempotent.
  bool finish() {
    if (finished_) return closed_cleanly_;
    finished_ = true;
    for (auto& p : pumps_) p->drain_and_close();
    uv_run(&loop_, UV_RUN_DEFAULT);
    closed_cleanly_ = uv_loop_close(&loop_) == 0;
    return closed_cleanly_;
  }

 private:
  uv_loop_t loop_{};
  std::vector<std::unique_ptr<sv::LogPump>> pumps_;
  bool finished_ = false;
  bool closed_cleanly_ = false;
};

auto has_size(const std::string& path, size_t size) {
  return [path, size] { return slurp(path).size() == size; };
}

// One pumped stream into dir's "console" and "log", and into "filtered" for
// lines that contain a needle. Members go in reverse order: the write end
// first, then the pump (draining into files still open).
struct FilteredStream {
  FilteredStream(const TempDir& dir, std::vector<std::string> needles, std::string prefix)
      : console(open_append(dir / "console")),
        file(open_append(dir / "log")),
        filtered(open_append(dir / "filtered")),
        copy{filtered.get(), std::move(needles)},
        write_end(fx.pump().add(file.get(), console.get(), std::move(prefix), &copy)) {}
  UniqueFd console, file, filtered;
  sv::LogPump::LineCopy copy;
  PumpFixture fx;
  UniqueFd write_end;
};

}  // namespace

TEST_CASE("a child's output reaches the console as prefixed lines and the log file as raw bytes",
          "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file(open_append(dir / "stdout.log"));
  PumpFixture fx;
  UniqueFd write_end(fx.pump().add(file.get(), console.get(), "[default0]:"));
  sv::SpawnSpec s = shell(R"(printf 'one\ntwo\n'; printf 'three')");
  s.stdout_fd = write_end.get();
  auto pid = sv::spawn(s);
  write_end.reset();
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  REQUIRE(exit_code(child.wait()) == 0);

  REQUIRE(fx.run_until(has_size(dir / "stdout.log", 13)));
  REQUIRE(fx.finish());
  CHECK(slurp(dir / "console") == "[default0]:one\n[default0]:two\n[default0]:three\n");
  CHECK(slurp(dir / "stdout.log") == "one\ntwo\nthree");
}

TEST_CASE("a partial line waits for its newline and then reaches the console whole",
          "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file(open_append(dir / "log"));
  PumpFixture fx;
  UniqueFd write_end(fx.pump().add(file.get(), console.get(), "[p]:"));

  write_all(write_end.get(), "hel");
  REQUIRE(fx.run_until(has_size(dir / "log", 3)));
  CHECK(slurp(dir / "console").empty());

  write_all(write_end.get(), "lo\nwor");
  REQUIRE(fx.run_until(has_size(dir / "log", 9)));
  CHECK(slurp(dir / "console") == "[p]:hello\n");

  // The write end is still open, as when a worker's descendant holds it:
  // draining must not wait for it.
  REQUIRE(fx.finish());
  CHECK(slurp(dir / "console") == "[p]:hello\n[p]:wor\n");
  CHECK(slurp(dir / "log") == "hello\nwor");
}

TEST_CASE("draining reads what the loop has not seen and ends the last partial line",
          "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file(open_append(dir / "log"));
  PumpFixture fx;
  UniqueFd write_end(fx.pump().add(file.get(), console.get(), "[p]:"));
  write_all(write_end.get(), "first\nlast");

  REQUIRE(fx.finish());
  CHECK(slurp(dir / "console") == "[p]:first\n[p]:last\n");
  CHECK(slurp(dir / "log") == "first\nlast");
}

// torchrun reads the log file with universal newlines: "\r" (a progress
// bar) and "\r\n" end console lines as "\n" does.
TEST_CASE("a carriage return ends a console line as torchrun's does, and the file keeps it",
          "[supervisor]") {
  TempDir dir;
  FilteredStream s(dir, {"2/3"}, "[p]:");
  write_all(s.write_end.get(), "1/3\r2/3\r3/3\ndos\r");
  REQUIRE(s.fx.run_until(has_size(dir / "log", 16)));
  // The "\n" of a "\r\n" split across reads ends no second line.
  write_all(s.write_end.get(), "\n\r\rlast\r");
  REQUIRE(s.fx.finish());
  CHECK(slurp(dir / "console") == "[p]:1/3\n[p]:2/3\n[p]:3/3\n[p]:dos\n[p]:\n[p]:\n[p]:last\n");
  CHECK(slurp(dir / "filtered") == "[p]:2/3\n");
  CHECK(slurp(dir / "log") == "1/3\r2/3\r3/3\ndos\r\n\r\rlast\r");
}

TEST_CASE("a stream without a console only fills its file, one without a file only the console",
          "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file(open_append(dir / "log"));
  PumpFixture fx;
  UniqueFd to_file(fx.pump().add(file.get(), -1, "[a]:"));
  UniqueFd to_console(fx.pump().add(-1, console.get(), "[b]:"));
  write_all(to_file.get(), "for the file\npartial");
  write_all(to_console.get(), "for the console\n");

  REQUIRE(fx.finish());
  CHECK(slurp(dir / "log") == "for the file\npartial");
  CHECK(slurp(dir / "console") == "[b]:for the console\n");
}

TEST_CASE("a line longer than kMaxLine reaches the console in prefixed pieces that make it up",
          "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file(open_append(dir / "log"));
  PumpFixture fx;
  UniqueFd write_end(fx.pump().add(file.get(), console.get(), "[p]:"));
  constexpr size_t kLength = 3 * sv::LogPump::kMaxLine + 1234;
  sv::SpawnSpec s = shell("head -c " + std::to_string(kLength) + " /dev/zero | tr '\\000' x; echo");
  s.stdout_fd = write_end.get();
  auto pid = sv::spawn(s);
  write_end.reset();
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  // The pipe holds less than the line: the loop must read while the child writes.
  REQUIRE(fx.run_until(has_size(dir / "log", kLength + 1)));
  REQUIRE(exit_code(child.wait()) == 0);
  REQUIRE(fx.finish());

  const std::string text = slurp(dir / "console");
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
  const auto pieces = split_lines(text);
  CHECK(pieces.size() >= 2);
  std::string joined;
  for (const auto& piece : pieces) {
    REQUIRE(piece.rfind("[p]:", 0) == 0);
    joined += piece.substr(4);
  }
  CHECK(joined == std::string(kLength, 'x'));
  CHECK(slurp(dir / "log") == std::string(kLength, 'x') + "\n");
}

TEST_CASE("lines whose text contains a needle are copied, prefixed, to the filtered file",
          "[supervisor]") {
  TempDir dir;
  FilteredStream s(dir, {"apple", "or,ange"}, "[apple0]:");
  // The prefix never matches on its own; the last line has no newline yet.
  write_all(s.write_end.get(), "an apple\nbanana\nor,ange juice\nor ange\napple pie");
  REQUIRE(s.fx.finish());
  CHECK(slurp(dir / "filtered") ==
        "[apple0]:an apple\n[apple0]:or,ange juice\n[apple0]:apple pie\n");
  CHECK(split_lines(slurp(dir / "console")).size() == 5);
  CHECK(slurp(dir / "log") == "an apple\nbanana\nor,ange juice\nor ange\napple pie");
}

TEST_CASE("two pumps sharing a console never mix their lines", "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file_a(open_append(dir / "a.log"));
  UniqueFd file_b(open_append(dir / "b.log"));
  PumpFixture fx(2);
  UniqueFd a(fx.pump(0).add(file_a.get(), console.get(), "[a]:"));
  UniqueFd b(fx.pump(1).add(file_b.get(), console.get(), "[b]:"));

  // Each write is consumed by the loop before the next, so the partial lines
  // of one writer are pending while the other completes its own.
  size_t a_bytes = 0, b_bytes = 0;
  auto feed = [&](const UniqueFd& fd, const std::string& text, size_t& total,
                  const std::string& log) {
    write_all(fd.get(), text);
    total += text.size();
    return fx.run_until(has_size(dir / log, total));
  };
  REQUIRE(feed(a, "A1-start", a_bytes, "a.log"));
  REQUIRE(feed(b, "B1\nB2-st", b_bytes, "b.log"));
  REQUIRE(feed(a, "-end\nA2-", a_bytes, "a.log"));
  REQUIRE(feed(b, "art\n", b_bytes, "b.log"));
  REQUIRE(feed(a, "tail", a_bytes, "a.log"));
  REQUIRE(fx.finish());

  CHECK(slurp(dir / "console") == "[b]:B1\n[a]:A1-start-end\n[b]:B2-start\n[a]:A2-tail\n");
}

TEST_CASE("lines of two children writing at once stay whole on a shared console", "[supervisor]") {
  TempDir dir;
  UniqueFd console(open_append(dir / "console"));
  UniqueFd file_a(open_append(dir / "a.log"));
  UniqueFd file_b(open_append(dir / "b.log"));
  PumpFixture fx(2);
  constexpr int kLines = 500;
  const std::string pad(80, '.');
  auto expected_line = [&](char who, int i) {
    return std::string(1, who) + "-" + std::to_string(i) + "-" + pad;
  };
  auto expected_log = [&](char who) {
    std::string all;
    for (int i = 0; i < kLines; ++i) all += expected_line(who, i) + "\n";
    return all;
  };
  const std::string loop_script = "i=0; while [ $i -lt " + std::to_string(kLines) +
                                  " ]; do echo \"$0-$i-" + pad + "\"; i=$((i+1)); done";

  std::vector<std::unique_ptr<Child>> children;
  for (char who : {'A', 'B'}) {
    const bool first = who == 'A';
    UniqueFd write_end(
        fx.pump(first ? 0 : 1)
            .add(first ? file_a.get() : file_b.get(), console.get(), first ? "[a]:" : "[b]:"));
    sv::SpawnSpec s = shell(loop_script);
    s.argv.push_back(std::string(1, who));
    s.stdout_fd = write_end.get();
    auto pid = sv::spawn(s);
    REQUIRE(pid.is_ok());
    children.push_back(std::make_unique<Child>(pid.value()));
  }
  const std::string log_a = expected_log('A'), log_b = expected_log('B');
  REQUIRE(fx.run_until([&] {
    return slurp(dir / "a.log").size() == log_a.size() &&
           slurp(dir / "b.log").size() == log_b.size();
  }));
  for (auto& c : children) REQUIRE(exit_code(c->wait()) == 0);
  REQUIRE(fx.finish());
  CHECK(slurp(dir / "a.log") == log_a);
  CHECK(slurp(dir / "b.log") == log_b);

  int next_a = 0, next_b = 0;
  for (const auto& line : split_lines(slurp(dir / "console"))) {
    if (line.rfind("[a]:", 0) == 0 && next_a < kLines) {
      REQUIRE(line.substr(4) == expected_line('A', next_a++));
    } else if (line.rfind("[b]:", 0) == 0 && next_b < kLines) {
      REQUIRE(line.substr(4) == expected_line('B', next_b++));
    } else {
      FAIL("a console line from neither writer, or one too many: " << line);
    }
  }
  CHECK(next_a == kLines);
  CHECK(next_b == kLines);
}

TEST_CASE("closing the death watch removes the directory and the file it was given",
          "[supervisor]") {
  elasticrun::test::TempDir base;
  const fs::path tree = base.path() / "elasticrun-mem-test";
  fs::create_directories(tree / "step_000000004.r0");
  std::ofstream(tree / "step_000000004.r0" / ".metadata") << "meta";
  std::ofstream(tree / "step_000000004.r0" / "__0_0.distcp") << "tensors";
  std::ofstream(tree / "loose") << "x";
  const fs::path block = base.path() / "elasticrun-1-2.ctl";
  std::ofstream(block) << "control";
  std::ofstream(base.path() / "other") << "not ours";
  auto watch = std::make_unique<sv::DeathWatch>();
  REQUIRE(watch->start(nullptr, {tree.string(), block.string()}).is_ok());
  CHECK(fs::exists(tree));  // the watch does nothing while the agent lives
  CHECK(fs::exists(block));
  watch.reset();
  CHECK_FALSE(fs::exists(tree));
  CHECK_FALSE(fs::exists(block));
  CHECK(fs::exists(base.path() / "other"));
}
