// Cgroups for the workers: finding this process's cgroup v2 (over fake /proc
// trees), and real cgroups below it holding real processes that call
// setsid, killed and removed, by the agent and by its death watch.
//
// The real cases need a cgroup v2 this process may write (root, or a
// delegated subtree); where there is none they pass with a warning that
// says why. Each creates its cgroups below this process's own and leaves
// none behind (CgroupSweep). Every wait is a bounded poll (kChildPatience).
#include "supervisor/cgroup.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "process_helpers.hpp"
#include "supervisor/cgroup_raw.hpp"
#include "supervisor/death_watch.hpp"
#include "supervisor/spawn.hpp"
#include "temp_dir.hpp"

namespace sv = elasticrun::supervisor;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using namespace elasticrun::test;  // NOLINT: test helpers

// A fake <proc_root>/self with the two files own_cgroup_dir reads.
void fake_self(const TempDir& root, const std::string& cgroup, const std::string& mountinfo) {
  fs::create_directories(root.path() / "self");
  write_text(root / "self/cgroup", cgroup);
  write_text(root / "self/mountinfo", mountinfo);
}

const std::string kProcAndSys =
    "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
    "23 1 0:22 / /sys rw,nosuid - sysfs sysfs rw\n";

// This test's job cgroup, or nothing (with a warning saying why) where the
// machine lets no cgroup v2 be written.
std::optional<sv::Cgroup> job_or_warn() {
  auto job = sv::Cgroup::create_job();
  if (!job.is_ok()) {
    WARN("skipped: no writable cgroup v2 here (" << job.status().message() << ")");
    return std::nullopt;
  }
  return std::move(job).value();
}

// The cgroup v2 path /proc says pid is in ("/a/b"), or "" if it is gone.
std::string cgroup_of(pid_t pid) {
  const std::string text = slurp("/proc/" + std::to_string(pid) + "/cgroup");
  const size_t at = text.find("0::");
  if (at == std::string::npos) return "";
  return text.substr(at + 3, text.find('\n', at) - at - 3);
}

// Whether a process of `path` (a directory under the mount) is in it, as
// /proc/<pid>/cgroup shows it: the directory ends with that cgroup's path.
bool in_cgroup(pid_t pid, const std::string& path) {
  const std::string cg = cgroup_of(pid);
  return !cg.empty() && path.size() >= cg.size() &&
         path.compare(path.size() - cg.size(), cg.size(), cg) == 0;
}

// Kills and removes a cgroup directory on scope exit if it is still there:
// what a test's failure would otherwise leave.
class CgroupSweep {
 public:
  explicit CgroupSweep(std::string path) : path_(std::move(path)) {}
  ~CgroupSweep() {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    sv::cgroup_write_kill(fd);
    eventually([&] { return sv::cgroup_populated(fd) != 1; });
    sv::cgroup_remove_below(fd);
    ::close(fd);
    ::rmdir(path_.c_str());
  }
  CgroupSweep(const CgroupSweep&) = delete;
  CgroupSweep& operator=(const CgroupSweep&) = delete;

 private:
  std::string path_;
};

// A worker that starts a helper in a session of its own (setsid, as a
// daemon does), which writes its pid to gc and sleeps; the worker waits.
sv::SpawnSpec worker_with_setsid_helper(const TempDir& dir) {
  sv::SpawnSpec s = shell(
      "setsid /bin/sh -c 'echo $$ > gc.tmp && mv gc.tmp gc; exec sleep 100' &\n"
      "wait\n");
  s.cwd = dir.path().string();
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// own_cgroup_dir, over fake /proc trees

TEST_CASE("this process's cgroup is its 0:: line below the cgroup2 mount point", "[cgroup]") {
  TempDir root;
  fake_self(root, "4:memory:/x\n0::/job/worker\n",
            kProcAndSys +
                "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n");
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE(dir.is_ok());
  CHECK(dir.value() == "/sys/fs/cgroup/unified/job/worker");
}

TEST_CASE("a process in the root cgroup has the mount point itself", "[cgroup]") {
  TempDir root;
  fake_self(root, "0::/\n", kProcAndSys + "30 23 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE(dir.is_ok());
  CHECK(dir.value() == "/sys/fs/cgroup");
}

TEST_CASE("a cgroup2 mount of a subtree shows the cgroup below its root", "[cgroup]") {
  TempDir root;
  fake_self(root, "0::/kubepods/pod1/c1\n",
            kProcAndSys +
                "50 23 0:27 /other /mnt/other rw - cgroup2 cgroup2 rw\n"
                "51 23 0:27 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE(dir.is_ok());
  CHECK(dir.value() == "/sys/fs/cgroup/c1");
}

TEST_CASE("a mount point with a space is unescaped from mountinfo's octal", "[cgroup]") {
  TempDir root;
  fake_self(root, "0::/a\n", kProcAndSys + "30 23 0:27 / /mnt/cg\\040two rw - cgroup2 none rw\n");
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE(dir.is_ok());
  CHECK(dir.value() == "/mnt/cg two/a");
}

TEST_CASE("a machine with cgroup v1 only has no cgroup v2 to offer, and says so", "[cgroup]") {
  TempDir root;
  fake_self(root, "4:memory:/x\n1:cpu:/\n",
            kProcAndSys + "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE_FALSE(dir.is_ok());
  CHECK_THAT(dir.status().context(), Contains("cgroup v1 only"));
}

TEST_CASE("a 0:: line without a cgroup2 mount is no cgroup to use", "[cgroup]") {
  TempDir root;
  fake_self(root, "0::/a\n", kProcAndSys);
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE_FALSE(dir.is_ok());
  CHECK_THAT(dir.status().context(), Contains("no cgroup2 file system is mounted"));
}

TEST_CASE("a cgroup2 mount that does not show this process's cgroup is not used", "[cgroup]") {
  TempDir root;
  fake_self(root, "0::/elsewhere/c\n",
            kProcAndSys + "51 23 0:27 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  auto dir = sv::own_cgroup_dir(root.path().string());
  REQUIRE_FALSE(dir.is_ok());
  CHECK_THAT(dir.status().context(), Contains("/elsewhere/c"));
}

// ---------------------------------------------------------------------------
// Real cgroups

TEST_CASE("a job cgroup is a fresh directory below this process's own, removed when it goes",
          "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  const std::string path = job->path();
  CgroupSweep sweep(path);
  auto own = sv::own_cgroup_dir();
  REQUIRE(own.is_ok());
  CHECK(fs::path(path).parent_path() == fs::path(own.value()));
  CHECK_THAT(fs::path(path).filename().string(),
             Contains("elasticrun-" + std::to_string(::getpid()) + "-"));
  CHECK(fs::is_directory(path));
  CHECK_FALSE(job->populated());
  job.reset();
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("a worker's setsid'd helper stays in the worker's cgroup and dies when it is killed",
          "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  CgroupSweep sweep(job->path());
  auto attempt = job->child("attempt_0");
  REQUIRE(attempt.is_ok());
  TempDir dir;
  sv::SpawnSpec s = worker_with_setsid_helper(dir);
  s.cgroup_fd = attempt.value().procs_fd();
  auto pid = sv::spawn(s);
  REQUIRE(pid.is_ok());
  Child worker(pid.value());
  auto helper = read_pid_file(dir / "gc");
  REQUIRE(helper);
  Stray stray(*helper, 0);
  REQUIRE(::getsid(*helper) == *helper);  // out of the worker's session and group
  CHECK(in_cgroup(worker.pid(), attempt.value().path()));
  CHECK(in_cgroup(*helper, attempt.value().path()));
  CHECK(attempt.value().populated());

  REQUIRE(attempt.value().kill().is_ok());
  CHECK(term_signal(worker.wait()) == SIGKILL);
  CHECK(eventually([&] { return process_gone(*helper); }));
  CHECK_FALSE(attempt.value().populated());
  const std::string path = attempt.value().path();
  REQUIRE(attempt.value().remove().is_ok());
  CHECK_FALSE(attempt.value().valid());
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("a running process moved into a cgroup by pid is in it", "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  CgroupSweep sweep(job->path());
  auto pid = sv::spawn(shell("exec sleep 100"));
  REQUIRE(pid.is_ok());
  Child child(pid.value());
  CHECK_FALSE(in_cgroup(child.pid(), job->path()));
  REQUIRE(job->add(child.pid()).is_ok());
  CHECK(in_cgroup(child.pid(), job->path()));
  REQUIRE(job->kill().is_ok());
  CHECK(term_signal(child.wait()) == SIGKILL);
}

TEST_CASE("a spawn into a cgroup that is gone fails at joining it and leaves no child",
          "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  CgroupSweep sweep(job->path());
  auto attempt = job->child("attempt_0");
  REQUIRE(attempt.is_ok());
  UniqueFd procs(::fcntl(attempt.value().procs_fd(), F_DUPFD_CLOEXEC, 10));
  REQUIRE(procs.get() >= 0);
  REQUIRE(attempt.value().remove().is_ok());
  sv::SpawnSpec s = shell("exit 0");
  s.cgroup_fd = procs.get();
  auto pid = sv::spawn(s);
  REQUIRE_FALSE(pid.is_ok());
  CHECK_THAT(pid.status().context(), Contains("joining its cgroup"));
  CHECK(no_children_left());
}

TEST_CASE("a cgroup's child of a leftover's name replaces it if it is empty", "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  CgroupSweep sweep(job->path());
  REQUIRE(::mkdir((job->path() + "/attempt_3").c_str(), 0755) == 0);
  auto again = job->child("attempt_3");
  REQUIRE(again.is_ok());
  CHECK(fs::is_directory(again.value().path()));
}

// What Cgroup::kill does before Linux 5.14, which has no cgroup.kill.
TEST_CASE("killing by the pids cgroup.procs lists reaches the processes of nested cgroups",
          "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  CgroupSweep sweep(job->path());
  auto inner = job->child("inner");
  REQUIRE(inner.is_ok());
  sv::SpawnSpec outer_spec = shell("exec sleep 100");
  outer_spec.cgroup_fd = job->procs_fd();
  sv::SpawnSpec inner_spec = shell("exec sleep 100");
  inner_spec.cgroup_fd = inner.value().procs_fd();
  auto outer_pid = sv::spawn(outer_spec);
  auto inner_pid = sv::spawn(inner_spec);
  REQUIRE(outer_pid.is_ok());
  REQUIRE(inner_pid.is_ok());
  Child a(outer_pid.value()), b(inner_pid.value());

  CHECK(sv::cgroup_kill_listed(job->dir_fd()) == 2);
  CHECK(term_signal(a.wait()) == SIGKILL);
  CHECK(term_signal(b.wait()) == SIGKILL);
  CHECK(sv::cgroup_populated(job->dir_fd()) == 0);
}

TEST_CASE("removing a cgroup removes the cgroups nested below it", "[cgroup]") {
  auto job = job_or_warn();
  if (!job) return;
  CgroupSweep sweep(job->path());
  const std::string path = job->path();
  fs::create_directories(path + "/a/b/c");
  fs::create_directories(path + "/d");
  REQUIRE(job->remove().is_ok());
  CHECK_FALSE(fs::exists(path));
}

// ---------------------------------------------------------------------------
// The death watch and the job cgroup

namespace {

struct AgentReport {
  int32_t watch = -1;
  int32_t worker = -1;
  char job[512] = {};
};

// A stand-in agent, forked: makes a job cgroup, starts a death watch that
// knows it and one worker in an attempt cgroup below it, reports, and waits
// to be killed. The worker's setsid'd helper is in no group the watch
// knows: only the cgroup reaches it. Never returns.
[[noreturn]] void run_agent(int report_fd, const sv::SpawnSpec& worker) {
  auto job = sv::Cgroup::create_job();
  if (!job.is_ok()) ::_exit(10);
  sv::DeathWatch watch;
  if (!watch.start(&job.value()).is_ok()) ::_exit(11);
  auto attempt = job.value().child("attempt_0");
  if (!attempt.is_ok()) ::_exit(12);
  sv::SpawnSpec s = worker;
  s.cgroup_fd = attempt.value().procs_fd();
  auto pid = sv::spawn(s);
  if (!pid.is_ok()) ::_exit(13);
  AgentReport r;
  r.watch = watch.pid();
  r.worker = pid.value();
  std::strncpy(r.job, job.value().path().c_str(), sizeof(r.job) - 1);
  if (::write(report_fd, &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) ::_exit(14);
  for (;;) ::pause();
}

std::optional<AgentReport> read_report(int fd) {
  AgentReport r;
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

TEST_CASE("when the agent is SIGKILLed its death watch kills the job cgroup and removes it",
          "[cgroup]") {
  if (!job_or_warn()) return;  // made and removed again: the stand-in makes its own
  TempDir dir;
  const sv::SpawnSpec worker = worker_with_setsid_helper(dir);
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  UniqueFd report_read(report[0]);
  const pid_t agent_pid = ::fork();
  REQUIRE(agent_pid >= 0);
  if (agent_pid == 0) run_agent(report[1], worker);
  ::close(report[1]);
  Child agent(agent_pid);

  auto r = read_report(report_read.get());
  REQUIRE(r);
  CgroupSweep sweep(r->job);
  auto helper = read_pid_file(dir / "gc");
  REQUIRE(helper);
  Stray stray(*helper, 0);
  REQUIRE(::getsid(*helper) == *helper);
  REQUIRE(in_cgroup(*helper, std::string(r->job) + "/attempt_0"));

  REQUIRE(::kill(agent_pid, SIGKILL) == 0);
  REQUIRE(term_signal(agent.wait()) == SIGKILL);
  CHECK(eventually([&] { return process_gone(*helper); }));
  CHECK(eventually([&] { return process_gone(r->worker); }));
  CHECK(eventually([&] { return process_gone(r->watch); }));
  CHECK_FALSE(fs::exists(r->job));
}
