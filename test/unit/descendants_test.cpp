// What a subreaper inherits from its workers' descendants: children_of over
// fake and real /proc, and kill_reparented in a forked stand-in agent (a
// subreaper of its own, so that this test process never becomes one and
// collects other tests' orphans) with a chain of setsid'd helpers.
#include "supervisor/descendants.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "process_helpers.hpp"
#include "supervisor/spawn.hpp"
#include "temp_dir.hpp"

namespace sv = elasticrun::supervisor;
namespace fs = std::filesystem;

namespace {

using namespace elasticrun::test;  // NOLINT: test helpers

void fake_stat(const TempDir& root, const std::string& pid, const std::string& stat) {
  fs::create_directories(root.path() / pid);
  write_text(root / (pid + "/stat"), stat);
}

bool contains(const std::vector<pid_t>& v, pid_t pid) {
  return std::find(v.begin(), v.end(), pid) != v.end();
}

}  // namespace

TEST_CASE("children_of lists the processes whose stat names the parent, odd names and all",
          "[descendants]") {
  TempDir root;
  fake_stat(root, "10", "10 (python3) S 7 10 10 0 -1 4194560\n");
  fake_stat(root, "11", "11 (a) (b) R 7 11 11 0 -1 0\n");  // a name with ") (" in it
  fake_stat(root, "12", "12 (zombie) Z 7 12 12 0 -1 0\n");
  fake_stat(root, "13", "13 (other) S 8 13 13 0 -1 0\n");
  fake_stat(root, "self", "99 (me) S 7 99 99 0 -1 0\n");  // not a pid directory
  fs::create_directories(root.path() / "14");             // vanished: no stat
  auto kids = sv::children_of(7, root.path().string());
  std::sort(kids.begin(), kids.end());
  CHECK(kids == std::vector<pid_t>{10, 11, 12});
  CHECK(sv::children_of(8, root.path().string()) == std::vector<pid_t>{13});
  CHECK(sv::children_of(9, root.path().string()).empty());
}

TEST_CASE("children_of finds a real child while it runs and while it is a zombie",
          "[descendants]") {
  auto pid = sv::spawn(shell("exec sleep 100"));
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  CHECK(contains(sv::children_of(::getpid()), child.pid()));
  REQUIRE(::kill(child.pid(), SIGKILL) == 0);
  REQUIRE(eventually([&] { return process_gone(child.pid()); }));  // a zombie now
  CHECK(contains(sv::children_of(::getpid()), child.pid()));
  CHECK(term_signal(child.wait()) == SIGKILL);
  CHECK_FALSE(contains(sv::children_of(::getpid()), pid.value()));
}

namespace {

constexpr int kChain = 3;

struct SweepReport {
  int32_t reaped = -1;
  int32_t spare_alive = 0;   // the spared child was still running after the sweep
  int32_t others_left = -1;  // children of the stand-in other than the spared one, after
};

// level.sh N: writes its pid to pid.N, starts level N-1 in a session of its
// own (setsid, as a daemon does), and becomes a sleep; level 1 starts none.
void write_chain(const TempDir& dir) {
  write_text(dir / "level.sh",
             "echo $$ > pid.$1.tmp && mv pid.$1.tmp pid.$1\n"
             "if [ \"$1\" -gt 1 ]; then setsid /bin/sh ./level.sh $(($1 - 1)) & fi\n"
             "exec sleep 100\n");
}

// The stand-in agent, forked: a subreaper whose worker starts the chain and
// exits once all of it is up, which leaves the chain's head to the stand-in
// (the rest are the head's descendants). Sweeps, sparing a child of its
// own, reports, and exits. Never returns.
[[noreturn]] void run_agent(int report_fd, const TempDir& dir) {
  if (!sv::become_subreaper().is_ok()) ::_exit(10);
  auto spare = sv::spawn(shell("exec sleep 100"));
  if (!spare.is_ok()) ::_exit(11);
  sv::SpawnSpec worker = shell("setsid /bin/sh ./level.sh " + std::to_string(kChain) +
                               " &\n"
                               "while [ ! -e pid.1 ]; do sleep 0.01; done\n");
  worker.cwd = dir.path().string();
  auto w = sv::spawn(worker);
  if (!w.is_ok()) ::_exit(12);
  int status = 0;
  while (::waitpid(w.value(), &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ::_exit(13);
  // The head's parent, the worker, is gone: the head is ours now.
  if (!eventually([&] { return sv::children_of(::getpid()).size() == 2; })) ::_exit(14);

  const pid_t spared[] = {spare.value()};
  SweepReport r;
  r.reaped = static_cast<int32_t>(sv::kill_reparented(spared));
  r.spare_alive = ::waitpid(spare.value(), nullptr, WNOHANG) == 0 ? 1 : 0;
  auto left = sv::children_of(::getpid());
  r.others_left = static_cast<int32_t>(left.size()) - (contains(left, spare.value()) ? 1 : 0);
  ::kill(spare.value(), SIGKILL);
  ::waitpid(spare.value(), nullptr, 0);
  if (::write(report_fd, &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) ::_exit(15);
  ::_exit(0);
}

std::optional<SweepReport> read_report(int fd) {
  SweepReport r;
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(&r);
  const auto deadline = std::chrono::steady_clock::now() + kChildPatience;
  while (got < sizeof(r)) {
    pollfd pfd{fd, POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    if (::poll(&pfd, 1, 100) <= 0) continue;
    const ssize_t n = ::read(fd, p + got, sizeof(r) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  return r;
}

}  // namespace

TEST_CASE("a subreaper's sweep kills a chain of setsid'd helpers link by link and spares its own",
          "[descendants]") {
  TempDir dir;
  write_chain(dir);
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  UniqueFd report_read(report[0]);
  const pid_t agent_pid = ::fork();
  REQUIRE(agent_pid >= 0);
  if (agent_pid == 0) run_agent(report[1], dir);
  ::close(report[1]);
  Child agent(agent_pid);

  auto r = read_report(report_read.get());
  std::vector<pid_t> chain;
  for (int level = 1; level <= kChain; ++level) {
    auto pid = read_pid_file(dir / ("pid." + std::to_string(level)));
    REQUIRE(pid);
    chain.push_back(*pid);
  }
  // Whatever happens below, no sleep of the chain outlives the test.
  Stray s1(chain[0], 0), s2(chain[1], 0), s3(chain[2], 0);
  REQUIRE(r);
  CHECK(exit_code(agent.wait()) == 0);
  // Each link was reparented to the stand-in only once the one above it died.
  CHECK(r->reaped == kChain);
  CHECK(r->spare_alive == 1);
  CHECK(r->others_left == 0);
  for (pid_t pid : chain) {
    INFO("pid " << pid);
    CHECK(process_gone(pid));
  }
}
