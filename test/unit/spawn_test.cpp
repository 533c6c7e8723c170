// spawn's exec step, which does execvpe's work without libc (spawn.cpp):
// the PATH search and its error rules, the /bin/sh fallback for a file the
// kernel cannot execute, and the child's state when many spawns run at once
// from several threads; the CPU affinity set before the exec. The rest of spawn's clean slate is in
// supervisor_test.cpp.
#include "supervisor/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "process_helpers.hpp"
#include "temp_dir.hpp"
#include "util/cpu_list.hpp"

namespace sv = elasticrun::supervisor;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace elasticrun::test;  // NOLINT: test helpers

namespace {

// Sets the test process's PATH for its lifetime: spawn searches the
// parent's PATH, as execvpe does, not the child's environment.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& path) {
    if (const char* old = ::getenv("PATH")) old_ = old;
    ::setenv("PATH", path.c_str(), 1);
  }
  ~ScopedPath() {
    if (old_) {
      ::setenv("PATH", old_->c_str(), 1);
    } else {
      ::unsetenv("PATH");
    }
  }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

 private:
  std::optional<std::string> old_;
};

// A file with text and mode, in a directory created as needed.
void make_file(const std::string& path, const std::string& text, fs::perms mode) {
  fs::create_directories(fs::path(path).parent_path());
  write_text(path, text);
  fs::permissions(path, mode);
}

constexpr auto kExecutable = fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read;
constexpr auto kNotExecutable = fs::perms::owner_read | fs::perms::owner_write;

// Runs spec to its exit with stdout to dir/out; what it wrote there. A child
// that exits other than with 0 fails the test.
std::string output_of(sv::SpawnSpec spec, const TempDir& dir) {
  UniqueFd out(open_append(dir / "out"));
  spec.stdout_fd = out.get();
  auto pid = sv::spawn(spec);
  if (!pid.is_ok()) FAIL(pid.status().message());
  Child child(pid.value());
  CHECK(exit_code(child.wait()) == 0);
  return slurp(dir / "out");
}

// spec fails to spawn with err at step (its name in the message), leaving
// no child behind.
void check_fails(const sv::SpawnSpec& spec, int err, const std::string& step) {
  auto pid = sv::spawn(spec);
  REQUIRE_FALSE(pid.is_ok());
  CHECK(pid.status().err() == err);
  CHECK_THAT(pid.status().context(), Contains(step));
  CHECK(no_children_left());
}

// A script without "#!": the kernel refuses it with ENOEXEC, execvpe runs it
// with /bin/sh. It prints $0 and its arguments.
const std::string kScript = "printf '%s|' \"$0\" \"$@\"\n";

}  // namespace

TEST_CASE("spawning a file that is not executable fails with EACCES and leaves no child",
          "[spawn]") {
  TempDir dir;
  make_file(dir / "prog", kScript, kNotExecutable);
  sv::SpawnSpec s;
  s.argv = {dir / "prog"};
  check_fails(s, EACCES, "exec");
}

TEST_CASE("a script without #! runs under /bin/sh with the script's path as $0 and its arguments",
          "[spawn]") {
  TempDir dir;
  make_file(dir / "bin/prog", kScript, kExecutable);
  SECTION("named by its path") {
    sv::SpawnSpec s;
    s.argv = {dir / "bin/prog", "one", "two words"};
    CHECK(output_of(s, dir) == dir / "bin/prog" + "|one|two words|");
  }
  SECTION("found in PATH, with no arguments") {
    ScopedPath path(dir / "bin");
    sv::SpawnSpec s;
    s.argv = {"prog"};
    CHECK(output_of(s, dir) == dir / "bin/prog" + "|");
  }
}

TEST_CASE("the PATH search skips a directory whose match is not executable and runs a later one",
          "[spawn]") {
  TempDir dir;
  make_file(dir / "denied/prog", "echo denied\n", kNotExecutable);
  make_file(dir / "notadir", "", kNotExecutable);
  make_file(dir / "allowed/prog", "echo allowed\n", kExecutable);
  // EACCES, ENOTDIR and ENOENT each let the search go on, as in execvpe.
  ScopedPath path(dir / "denied" + ":" + dir / "notadir" + ":" + dir / "missing" + ":" +
                  dir / "allowed");
  sv::SpawnSpec s;
  s.argv = {"prog"};
  CHECK(output_of(s, dir) == "allowed\n");
}

TEST_CASE("a PATH search that finds only files it may not execute fails with EACCES, not ENOENT",
          "[spawn]") {
  TempDir dir;
  make_file(dir / "denied/prog", "echo denied\n", kNotExecutable);
  ScopedPath path(dir / "denied" + ":" + dir / "missing");
  sv::SpawnSpec s;
  s.argv = {"prog"};
  check_fails(s, EACCES, "exec");
}

TEST_CASE("an empty PATH entry stands for the working directory the child runs in", "[spawn]") {
  TempDir dir;
  make_file(dir / "work/prog", "echo here\n", kExecutable);
  ScopedPath path(dir / "missing" + ":");
  sv::SpawnSpec s;
  s.argv = {"prog"};
  s.cwd = dir / "work";
  CHECK(output_of(s, dir) == "here\n");
}

TEST_CASE("a program name of NAME_MAX bytes is found in PATH", "[spawn]") {
  TempDir dir;
  const std::string name(NAME_MAX, 'p');
  make_file(dir / "bin/" + name, "echo long\n", kExecutable);
  ScopedPath path(dir / "bin");
  sv::SpawnSpec s;
  s.argv = {name};
  CHECK(output_of(s, dir) == "long\n");
}

TEST_CASE("spawning with a working directory that is a file fails with ENOTDIR from chdir",
          "[spawn]") {
  TempDir dir;
  make_file(dir / "file", "", kNotExecutable);
  sv::SpawnSpec s = shell("exit 0");
  s.cwd = dir / "file";
  check_fails(s, ENOTDIR, "chdir");
}

TEST_CASE("a started spawn that is dropped unfinished waits until its child has exec'd",
          "[spawn]") {
  pid_t pid = -1;
  {
    sv::SpawnSpec s;
    s.argv = {"/bin/sleep", "100"};
    auto pending = sv::start_spawn(s);
    REQUIRE(pending.is_ok());
    pid = pending.value().pid;
  }
  Child child(pid);
  // Once the destructor has returned, the child runs the new program.
  std::error_code ec;
  CHECK(fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).filename() == "sleep");
}

TEST_CASE("a started spawn whose exec fails can be dropped unfinished and leaves its child to reap",
          "[spawn]") {
  pid_t pid = -1;
  {
    sv::SpawnSpec s;
    s.argv = {"/nonexistent/elasticrun-no-such-program"};
    auto pending = sv::start_spawn(s);
    REQUIRE(pending.is_ok());
    pid = pending.value().pid;
  }
  Child child(pid);
  CHECK(exit_code(child.wait()) == 127);
}

// Each thread starts spawns of its own while the others do: every child
// must run its own program, get its own exec error, and hold nothing but its
// standard streams, whatever the other threads had open at the time.
TEST_CASE("spawns from several threads at once each run their own program with only fds 0 1 2",
          "[spawn]") {
  TempDir dir;
  // Not close-on-exec: a child must close it whichever thread spawned it.
  UniqueFd leaky(::open("/dev/null", O_RDONLY));
  REQUIRE(leaky.get() >= 3);
  constexpr int kThreads = 4;
  constexpr int kSpawns = 24;
  std::vector<std::vector<std::string>> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto fail = [&](const std::string& what) { errors[t].push_back(what); };
      for (int i = 0; i < kSpawns; ++i) {
        const std::string name = std::to_string(t) + "-" + std::to_string(i);
        sv::SpawnSpec s;
        s.env = {kPath};
        if (i % 4 == 3) {
          s.argv = {"/nonexistent/" + name};
          auto pid = sv::spawn(s);
          if (pid.is_ok() || pid.status().err() != ENOENT ||
              pid.status().context().find(name) == std::string::npos) {
            fail(name + ": expected ENOENT naming the program");
          }
          continue;
        }
        // ls opens /proc/self/fd as its descriptor 3 to list it.
        s.argv = {"/bin/ls", "/proc/self/fd"};
        UniqueFd out(open_append(dir / name));
        s.stdout_fd = out.get();
        auto pid = sv::spawn(s);
        if (!pid.is_ok()) {
          fail(name + ": " + pid.status().message());
          continue;
        }
        Child child(pid.value());
        if (exit_code(child.wait()) != 0) fail(name + ": exit");
        if (slurp(dir / name) != "0\n1\n2\n3\n") fail(name + ": fds " + slurp(dir / name));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(errors[t].empty());
    for (const auto& e : errors[t]) WARN(e);
  }
  CHECK(no_children_left());
}

// An agent started with its standard descriptors closed gets them back from
// open and pipe2. The report pipe's write end must then not sit on 0, 1 or
// 2, where the child's redirects would replace it: the parent would read
// EOF as an exec and free what the child still runs on.
TEST_CASE("a parent whose standard descriptors are closed still gets the child's exec error",
          "[spawn]") {
  TempDir dir;
  const std::string log = dir / "log";
  const pid_t helper = ::fork();
  REQUIRE(helper >= 0);
  if (helper == 0) {
    ::close(0);
    ::close(1);
    ::close(2);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);  // takes 0
    sv::SpawnSpec s;
    s.argv = {"/nonexistent/elasticrun-no-such-program"};
    s.stdout_fd = fd;
    s.stderr_fd = fd;
    auto pid = sv::spawn(s);
    ::_exit(fd == 0 && !pid.is_ok() && pid.status().err() == ENOENT ? 0 : 1);
  }
  Child child(helper);
  CHECK(exit_code(child.wait()) == 0);
  CHECK(slurp(log).empty());
}

// --warm-start's channel: the descriptor given as extra_fd is the child's
// fd 3, open without close-on-exec, and nothing else leaks past it.
TEST_CASE("a descriptor given for fd 3 is the child's fd 3 and the only one past the streams",
          "[spawn]") {
  TempDir dir;
  UniqueFd leaky(::open("/dev/null", O_RDONLY));
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(::fcntl(pipe_fds[1], F_DUPFD_CLOEXEC, 10));
  ::close(pipe_fds[1]);
  sv::SpawnSpec s;
  s.env = {kPath};
  // ls lists its own fds (its listing is fd 4 then); the shell writes to fd 3.
  s.argv = {"/bin/sh", "-c", "ls /proc/self/fd; echo through-three >&3"};
  s.extra_fd = write_end.get();
  CHECK(output_of(s, dir) == "0\n1\n2\n3\n4\n");
  write_end.reset();
  char buf[64] = {};
  CHECK(::read(read_end.get(), buf, sizeof(buf) - 1) > 0);
  CHECK(std::string(buf) == "through-three\n");
}

TEST_CASE("a descriptor for fd 3 that is itself below 4 is refused before any child starts",
          "[spawn]") {
  sv::SpawnSpec s;
  s.argv = {"/bin/true"};
  s.extra_fd = 2;
  auto pid = sv::spawn(s);
  REQUIRE_FALSE(pid.is_ok());
  CHECK(pid.status().err() == EINVAL);
  CHECK(no_children_left());
}

namespace {

// The Cpus_allowed_list line of /proc/self/status as a child started with
// spec (plus /bin/cat) sees it.
std::string child_cpus(sv::SpawnSpec spec) {
  TempDir dir;  // output_of appends
  spec.argv = {"/bin/cat", "/proc/self/status"};
  const std::string status = output_of(std::move(spec), dir);
  const std::string key = "Cpus_allowed_list:";
  const size_t at = status.find(key);
  if (at == std::string::npos) return "(no " + key + ")";
  size_t begin = status.find_first_not_of(" \t", at + key.size());
  return status.substr(begin, status.find('\n', begin) - begin);
}

// The first two CPUs this test process may run on (on the suite's machine,
// which has two: 0 and 1).
std::vector<int> two_own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof(set), &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

// --numa-binding: the child is bound before its exec, so the program's
// first instruction runs on the CPUs asked for.
TEST_CASE("a child given a CPU affinity runs on exactly those CPUs from its exec on", "[spawn]") {
  const std::vector<int> cpus = two_own_cpus();
  REQUIRE(cpus.size() == 2);  // a machine of one CPU cannot tell a binding from none
  const std::string a = std::to_string(cpus[0]), b = std::to_string(cpus[1]);
  sv::SpawnSpec s;
  s.cpu_affinity = {cpus[1]};
  CHECK(child_cpus(s) == b);
  s.cpu_affinity = {cpus[0]};
  CHECK(child_cpus(s) == a);
  s.cpu_affinity = {cpus[1], cpus[0]};
  CHECK(child_cpus(s) == a + (cpus[1] == cpus[0] + 1 ? "-" : ",") + b);
}

TEST_CASE("a child given no CPU affinity keeps its parent's", "[spawn]") {
  const std::string own = [] {
    const std::string status = slurp("/proc/self/status");
    const size_t at = status.find("Cpus_allowed_list:");
    const size_t begin = status.find_first_not_of(" \t", at + 18);
    return status.substr(begin, status.find('\n', begin) - begin);
  }();
  CHECK(child_cpus(sv::SpawnSpec{}) == own);
}

TEST_CASE("an affinity of CPUs that are not there fails the spawn at sched_setaffinity",
          "[spawn]") {
  sv::SpawnSpec s;
  s.argv = {"/bin/true"};
  s.cpu_affinity = {elasticrun::util::kMaxCpu - 1};
  check_fails(s, EINVAL, "sched_setaffinity");
}

TEST_CASE("a negative or too large CPU number is refused before any child starts", "[spawn]") {
  for (int cpu : {-1, elasticrun::util::kMaxCpu}) {
    INFO(cpu);
    sv::SpawnSpec s;
    s.argv = {"/bin/true"};
    s.cpu_affinity = {0, cpu};
    auto pid = sv::spawn(s);
    REQUIRE_FALSE(pid.is_ok());
    CHECK(pid.status().err() == EINVAL);
    CHECK(no_children_left());
  }
}
