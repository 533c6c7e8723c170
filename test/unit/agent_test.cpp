// The agent's pure building blocks, checked against torchrun's behaviour
// (notes/torchrun-spec.md, sections 2 and 4): the worker environment, the
// ${local_rank} template, and the failure report with the agent's error file.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent/failure_report.hpp"
#include "agent/worker_env.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

namespace ag = elasticrun::agent;
namespace sv = elasticrun::supervisor;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Env = std::map<std::string, std::string>;

namespace {

using TempDir = elasticrun::test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Every difference between two environments, one per line; empty when equal.
std::string env_diff(const Env& expected, const Env& actual) {
  std::string out;
  for (const auto& [k, v] : expected) {
    auto it = actual.find(k);
    if (it == actual.end()) {
      out += "missing " + k + "=" + v + "\n";
    } else if (it->second != v) {
      out += k + ": expected '" + v + "', got '" + it->second + "'\n";
    }
  }
  for (const auto& [k, v] : actual) {
    if (!expected.count(k)) out += "unexpected " + k + "=" + v + "\n";
  }
  return out;
}

std::string value_of(const Env& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? "<unset>" : it->second;
}

}  // namespace

// ---------------------------------------------------------------------------
// worker_env

namespace {

// Node 1 of 2, two workers per node: global ranks 2 and 3.
ag::Assignment second_node_of_two_by_two() {
  ag::Assignment a;
  a.group_rank = 1;
  a.group_world_size = 2;
  a.local_world_size = 2;
  a.rank_offset = 2;
  a.world_size = 4;
  a.master_addr = "10.1.2.3";
  a.master_port = 29500;
  a.use_agent_store = true;
  a.restart_count = 1;
  return a;
}

ag::WorkerEnvOptions trainer_options() {
  ag::WorkerEnvOptions o;
  o.role = "trainer";
  o.run_id = "job7";
  o.max_restarts = 3;
  o.error_files = {"/logs/run/attempt_1/0/error.json", "/logs/run/attempt_1/1/error.json"};
  return o;
}

}  // namespace

TEST_CASE(
    "the second node of a 2x2 job gives each worker every torchrun variable on top of "
    "the agent's environment",
    "[agent]") {
  const int local_rank = GENERATE(0, 1);
  // The agent's own values of torchrun's variables must not reach the worker.
  const Env base = {{"PATH", "/usr/bin:/bin"},
                    {"FOO", "bar"},
                    {"RANK", "99"},
                    {"LOCAL_RANK", "7"},
                    {"WORLD_SIZE", "9"},
                    {"MASTER_PORT", "1"},
                    {"MASTER_ADDR", "elsewhere"},
                    {"TORCHELASTIC_RUN_ID", "stale"},
                    {"TORCHELASTIC_ERROR_FILE", "/agent/error.json"},
                    {"CUDA_VISIBLE_DEVICES", "0,1"}};
  const Env env = ag::worker_env(base, second_node_of_two_by_two(), trainer_options(), local_rank);

  Env expected = base;
  const std::string rank = std::to_string(2 + local_rank);
  expected["RANK"] = rank;
  expected["LOCAL_RANK"] = std::to_string(local_rank);
  expected["GROUP_RANK"] = "1";
  expected["ROLE_RANK"] = rank;
  expected["ROLE_NAME"] = "trainer";
  expected["LOCAL_WORLD_SIZE"] = "2";
  expected["WORLD_SIZE"] = "4";
  expected["GROUP_WORLD_SIZE"] = "2";
  expected["ROLE_WORLD_SIZE"] = "4";
  expected["MASTER_ADDR"] = "10.1.2.3";
  expected["MASTER_PORT"] = "29500";
  expected["TORCHELASTIC_RESTART_COUNT"] = "1";
  expected["TORCHELASTIC_MAX_RESTARTS"] = "3";
  expected["TORCHELASTIC_RUN_ID"] = "job7";
  expected["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  expected["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  expected["TORCHELASTIC_ERROR_FILE"] =
      "/logs/run/attempt_1/" + std::to_string(local_rank) + "/error.json";
  // CUDA_VISIBLE_DEVICES passes through; OMP_NUM_THREADS is the agent's to
  // put in base (torchrun sets it in its own environment when nproc > 1).
  INFO(env_diff(expected, env));
  CHECK(env_diff(expected, env).empty());
}

TEST_CASE("TORCH_NCCL_ASYNC_ERROR_HANDLING keeps the agent's value and is 1 otherwise", "[agent]") {
  const auto a = second_node_of_two_by_two();
  const auto o = trainer_options();
  CHECK(value_of(ag::worker_env({}, a, o, 0), "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  // Python's os.getenv(name, "1") keeps a value that is set, even an empty one.
  const std::string parent = GENERATE(std::string("3"), std::string("0"), std::string(""));
  CHECK(value_of(ag::worker_env({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", parent}}, a, o, 0),
                 "TORCH_NCCL_ASYNC_ERROR_HANDLING") == parent);
}

TEST_CASE("a fixed hang limit reaches the SDK and bounds NCCL's watchdog monitor", "[agent]") {
  const auto a = second_node_of_two_by_two();
  auto o = trainer_options();
  const Env none = ag::worker_env({}, a, o, 0);
  CHECK_FALSE(none.count("ELASTICRUN_HANG_TIMEOUT"));
  CHECK_FALSE(none.count("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"));
  o.hang_seconds = 299.5;
  const Env env = ag::worker_env({}, a, o, 0);
  CHECK(value_of(env, "ELASTICRUN_HANG_TIMEOUT") == "300");
  CHECK(value_of(env, "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC") == "300");
  o.hang_seconds = 5;
  CHECK(value_of(ag::worker_env({}, a, o, 0), "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC") == "60");
  // One the user set is theirs.
  CHECK(value_of(ag::worker_env({{"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "900"}}, a, o, 0),
                 "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC") == "900");
}

TEST_CASE("TORCHELASTIC_USE_AGENT_STORE is spelled as Python's str(bool)", "[agent]") {
  auto a = second_node_of_two_by_two();
  const auto o = trainer_options();
  a.use_agent_store = true;
  CHECK(value_of(ag::worker_env({}, a, o, 0), "TORCHELASTIC_USE_AGENT_STORE") == "True");
  a.use_agent_store = false;
  CHECK(value_of(ag::worker_env({}, a, o, 0), "TORCHELASTIC_USE_AGENT_STORE") == "False");
}

TEST_CASE(
    "with a virtual local rank each worker sees LOCAL_RANK 0 and its own entry of the "
    "agent's CUDA_VISIBLE_DEVICES",
    "[agent]") {
  const auto a = second_node_of_two_by_two();
  auto o = trainer_options();
  o.virtual_local_rank = true;
  const Env base = {{"CUDA_VISIBLE_DEVICES", "4, 5"}};
  for (int local_rank : {0, 1}) {
    INFO("local rank " << local_rank);
    const Env env = ag::worker_env(base, a, o, local_rank);
    CHECK(value_of(env, "LOCAL_RANK") == "0");
    CHECK(value_of(env, "RANK") == std::to_string(2 + local_rank));
    CHECK(value_of(env, "CUDA_VISIBLE_DEVICES") == (local_rank == 0 ? "4" : "5"));
    CHECK(value_of(env, "HIP_VISIBLE_DEVICES") == "<unset>");
  }
}

TEST_CASE("with a virtual local rank and no device list each worker sees the GPU of its rank",
          "[agent]") {
  auto o = trainer_options();
  o.virtual_local_rank = true;
  const Env env = ag::worker_env({}, second_node_of_two_by_two(), o, 1);
  CHECK(value_of(env, "LOCAL_RANK") == "0");
  CHECK(value_of(env, "CUDA_VISIBLE_DEVICES") == "1");
  CHECK(value_of(env, "HIP_VISIBLE_DEVICES") == "<unset>");
}

TEST_CASE("with a virtual local rank HIP_VISIBLE_DEVICES takes precedence when it is not empty",
          "[agent]") {
  auto o = trainer_options();
  o.virtual_local_rank = true;
  const auto a = second_node_of_two_by_two();

  const Env both =
      ag::worker_env({{"HIP_VISIBLE_DEVICES", "2,3"}, {"CUDA_VISIBLE_DEVICES", "4,5"}}, a, o, 1);
  CHECK(value_of(both, "CUDA_VISIBLE_DEVICES") == "3");
  CHECK(value_of(both, "HIP_VISIBLE_DEVICES") == "3");

  const Env empty_hip =
      ag::worker_env({{"HIP_VISIBLE_DEVICES", ""}, {"CUDA_VISIBLE_DEVICES", "4,5"}}, a, o, 1);
  CHECK(value_of(empty_hip, "CUDA_VISIBLE_DEVICES") == "5");
  CHECK(value_of(empty_hip, "HIP_VISIBLE_DEVICES") == "");
}

TEST_CASE("with a virtual local rank a rank beyond the agent's device list is a config error",
          "[agent]") {
  auto o = trainer_options();
  o.virtual_local_rank = true;
  const auto a = second_node_of_two_by_two();
  const Env short_cuda = {{"CUDA_VISIBLE_DEVICES", "4"}};
  CHECK_THROWS_AS(ag::worker_env(short_cuda, a, o, 1), elasticrun::ConfigError);
  CHECK_THROWS_WITH(ag::worker_env(short_cuda, a, o, 1), Contains("CUDA_VISIBLE_DEVICES=4"));
  const Env short_hip = {{"HIP_VISIBLE_DEVICES", "7"}, {"CUDA_VISIBLE_DEVICES", "4,5"}};
  CHECK_THROWS_AS(ag::worker_env(short_hip, a, o, 1), elasticrun::ConfigError);
  CHECK_THROWS_WITH(ag::worker_env(short_hip, a, o, 1), Contains("HIP_VISIBLE_DEVICES=7"));
}

// torchrun splits with Python's str.split(","): "" is one empty entry and
// "4,5," three, the last empty. A worker given an empty list sees no GPU.
TEST_CASE(
    "with a virtual local rank empty entries of the device list count as Python's split "
    "counts them",
    "[agent]") {
  auto o = trainer_options();
  o.virtual_local_rank = true;
  const auto a = second_node_of_two_by_two();
  std::string visible = "<threw>";
  try {
    visible =
        value_of(ag::worker_env({{"CUDA_VISIBLE_DEVICES", ""}}, a, o, 0), "CUDA_VISIBLE_DEVICES");
  } catch (const elasticrun::ConfigError&) {
  }
  CHECK(visible == "");
  visible = "<threw>";
  try {
    visible = value_of(ag::worker_env({{"CUDA_VISIBLE_DEVICES", "4,5,"}}, a, o, 2),
                       "CUDA_VISIBLE_DEVICES");
  } catch (const elasticrun::ConfigError&) {
  }
  CHECK(visible == "");
}

TEST_CASE("to_envp lists NAME=value pairs and current_environment reads the process's own",
          "[agent]") {
  const auto envp = ag::to_envp({{"B", "2=two"}, {"A", ""}});
  CHECK(envp == std::vector<std::string>{"A=", "B=2=two"});
  REQUIRE(::setenv("ELASTICRUN_AGENT_TEST", "x=y", 1) == 0);
  const Env env = ag::current_environment();
  ::unsetenv("ELASTICRUN_AGENT_TEST");
  CHECK(value_of(env, "ELASTICRUN_AGENT_TEST") == "x=y");
}

// ---------------------------------------------------------------------------
// substitute_template: every expectation below is what Python 3.11's
// string.Template(text).safe_substitute(local_rank="3", _="U") returns.

TEST_CASE("substitute_template behaves like Python's Template.safe_substitute", "[agent]") {
  const std::map<std::string, std::string> vars = {{"local_rank", "3"}, {"_", "U"}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"${local_rank}", "3"},
      {"$local_rank", "3"},
      {"--out=/x/${local_rank}/f$local_rank.log", "--out=/x/3/f3.log"},
      {"${local_rank}${local_rank}", "33"},
      {"$$", "$"},
      {"a$$b", "a$b"},
      {"$$local_rank", "$local_rank"},
      {"$${local_rank}", "${local_rank}"},
      {"$$$local_rank", "$3"},
      {"$local_rankx", "$local_rankx"},
      {"$local_rank}", "3}"},
      {"${local_rank}}", "3}"},
      {"${other}", "${other}"},
      {"$other", "$other"},
      {"$foo$local_rank", "$foo3"},
      {"$LOCAL_RANK", "$LOCAL_RANK"},
      {"$_", "U"},
      {"x$", "x$"},
      {"$", "$"},
      {"${local_rank", "${local_rank"},
      {"$${x", "${x"},
      {"${}", "${}"},
      {"${ local_rank}", "${ local_rank}"},
      {"$1", "$1"},
      {"$-", "$-"},
      {"caf\u00e9$local_rank", std::string("caf\u00e9") + "3"},
      {"$\u00e9", "$\u00e9"},
      {"", ""},
      {"plain", "plain"},
  };
  for (const auto& [text, expected] : cases) {
    INFO("template: " << text);
    CHECK(ag::substitute_template(text, vars) == expected);
  }
}

// ---------------------------------------------------------------------------
// FailureReport

namespace {

constexpr std::time_t kT0 = 1700000000;
const std::string kNoTraceback =
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";

sv::WorkerExit failure(int local_rank, pid_t pid, int exit_code, int term_signal, std::time_t when,
                       std::chrono::milliseconds extra = {}) {
  sv::WorkerExit e;
  e.local_rank = local_rank;
  e.pid = pid;
  e.exit_code = exit_code;
  e.term_signal = term_signal;
  e.when = std::chrono::system_clock::from_time_t(when) + extra;
  return e;
}

// datetime.fromtimestamp(t).isoformat(sep="_") for a whole-second t.
std::string local_iso(std::time_t t) {
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

// The host the report names (socket.getfqdn() in torchrun): it depends on the
// machine, so it is read back from the report rather than predicted.
std::string host_in(const std::string& report) {
  const std::string key = "\n  host      : ";
  const size_t at = report.find(key);
  if (at == std::string::npos) return {};
  const size_t start = at + key.size();
  return report.substr(start, report.find('\n', start) - start);
}

struct Block {
  int idx;
  std::time_t time;
  std::string rank;  // "5 (local_rank: 1)"
  std::string exitcode;
  std::string error_file;
  std::string traceback;
};

std::string block(const Block& b, const std::string& host) {
  return "[" + std::to_string(b.idx) + "]:\n" + "  time      : " + local_iso(b.time) + "\n" +
         "  host      : " + host + "\n" + "  rank      : " + b.rank + "\n" +
         "  exitcode  : " + b.exitcode + "\n" + "  error_file: " + b.error_file + "\n" +
         "  traceback : " + b.traceback;
}

std::string layout(size_t width, const std::string& title, const std::string& others,
                   const std::string& root) {
  const std::string border(width, '='), section(width, '-');
  return "\n" + border + "\n" + title + "\n" + section + "\nFailures:\n" + others + "\n" + section +
         "\nRoot Cause (first observed failure):\n" + root + "\n" + border;
}

// What torch's @record writes to TORCHELASTIC_ERROR_FILE.
nlohmann::json record_error(const std::string& message, const std::string& callstack,
                            std::time_t timestamp) {
  return {
      {"message",
       {{"message", message},
        {"extraInfo", {{"py_callstack", callstack}, {"timestamp", std::to_string(timestamp)}}}}}};
}

const std::string kCallstack =
    "Traceback (most recent call last):\n"
    "  File \"/home/user/projects/a-long-project-name/train.py\", line 12, in <module>\n"
    "    raise ValueError(\"boom\")\n"
    "ValueError: boom\n";

// Sends stderr to a file for its lifetime.
class CaptureStderr {
 public:
  explicit CaptureStderr(const std::string& path) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CaptureStderr() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace

TEST_CASE("a report without failures is empty", "[agent]") {
  CHECK(ag::FailureReport{}.format(0).empty());
}

TEST_CASE("an exit-code failure without an error file is reported in torchrun's layout",
          "[agent]") {
  ag::FailureReport r;
  r.script_name = "train.py";
  r.failures = {failure(0, 123, 3, 0, kT0)};
  const std::string text = r.format(0);
  const std::string host = host_in(text);
  REQUIRE_FALSE(host.empty());
  // The traceback line (91 characters) caps the width at 60. The exitcode
  // line ends in one space where a signal name would go.
  const std::string root =
      block({0, kT0, "0 (local_rank: 0)", "3 (pid: 123) ", "<N/A>", kNoTraceback}, host);
  CHECK(text == layout(60, "train.py FAILED", "  <NO_OTHER_FAILURES>", root));
}

TEST_CASE("a failure by signal names the signal and sizes the borders to its longest line",
          "[agent]") {
  ag::FailureReport r;
  r.script_name = "train.py";
  r.failures = {failure(1, 123, 0, SIGKILL, kT0)};
  const std::string text = r.format(4);
  const std::string host = host_in(text);
  REQUIRE_FALSE(host.empty());
  const std::string traceback = "Signal 9 (SIGKILL) received by PID 123";
  const std::string root =
      block({0, kT0, "5 (local_rank: 1)", "-9 (pid: 123)  (SIGKILL)", "<N/A>", traceback}, host);
  // min(60, max(title, longest line)): here the traceback line (52) unless
  // the host line is longer.
  const size_t width =
      std::min<size_t>(60, std::max<size_t>(14 + traceback.size(), 14 + host.size()));
  CHECK(text == layout(width, "train.py FAILED", "  <NO_OTHER_FAILURES>", root));
}

TEST_CASE("a title longer than every line sets the border width up to 60", "[agent]") {
  ag::FailureReport r;
  r.failures = {failure(0, 7, 0, SIGKILL, kT0)};
  r.script_name = std::string(70, 's');
  const std::string text = r.format(0);
  CHECK_THAT(text, Contains("\n" + std::string(60, '=') + "\n" + std::string(70, 's') +
                            " FAILED\n" + std::string(60, '-') + "\n"));
  const std::string host = host_in(text);
  if (host.size() <= 40) {
    // The title is 56 wide; with a host of up to 40 the lines are at most 54.
    r.script_name = std::string(49, 's');
    CHECK_THAT(r.format(0), Contains("\n" + std::string(56, '=') + "\n" + std::string(49, 's') +
                                     " FAILED\n" + std::string(56, '-') + "\n"));
  }
}

TEST_CASE(
    "with error files the earliest recorded failure is the root cause, shown with its "
    "indented traceback",
    "[agent]") {
  TempDir dir;
  const std::string file0 = dir / "attempt_0/0/error.json";
  const std::string file1 = dir / "attempt_0/1/error.json";
  // Rank 1 is observed later but recorded its error earlier.
  write_text(file1, record_error("ValueError: boom", kCallstack, kT0).dump());
  ag::FailureReport r;
  r.script_name = "train.py";
  r.error_files = {file0, file1};
  r.failures = {failure(0, 101, 3, 0, kT0 + 100), failure(1, 102, 1, 0, kT0 + 200)};
  const std::string text = r.format(0);
  const std::string host = host_in(text);
  REQUIRE_FALSE(host.empty());

  const std::string other =
      block({0, kT0 + 100, "0 (local_rank: 0)", "3 (pid: 101) ", "<N/A>", kNoTraceback}, host);
  const std::string indented =
      "Traceback (most recent call last):\n"
      "    File \"/home/user/projects/a-long-project-name/train.py\", line 12, in <module>\n"
      "      raise ValueError(\"boom\")\n"
      "  ValueError: boom\n"
      "  ";
  const std::string root =
      block({1, kT0, "1 (local_rank: 1)", "1 (pid: 102) ", file1, indented}, host);
  CHECK(text == layout(60, "train.py FAILED", other, root));
}

TEST_CASE(
    "without error files the earliest observed failure is the root cause, in whole "
    "seconds with ties to the first",
    "[agent]") {
  ag::FailureReport r;
  r.script_name = "train.py";
  auto root_index = [&] {
    const std::string text = r.format(0);
    const std::string key = "Root Cause (first observed failure):\n[";
    const size_t at = text.find(key);
    return at == std::string::npos ? -1 : text[at + key.size()] - '0';
  };
  r.failures = {failure(0, 101, 1, 0, kT0 + 5), failure(1, 102, 1, 0, kT0),
                failure(2, 103, 1, 0, kT0 + 1)};
  CHECK(root_index() == 1);
  // Observed 800 ms apart within one second: a tie, which the first wins.
  r.failures = {failure(0, 101, 1, 0, kT0, std::chrono::milliseconds(900)),
                failure(1, 102, 1, 0, kT0, std::chrono::milliseconds(100))};
  CHECK(root_index() == 0);
}

TEST_CASE("an error file torchrun cannot use is reported as not available", "[agent]") {
  TempDir dir;
  const std::string file = dir / "0/error.json";
  write_text(file, "{\"message\": {\"message\": \"torn");
  ag::FailureReport r;
  r.script_name = "train.py";
  r.error_files = {file};
  r.failures = {failure(0, 101, 2, 0, kT0)};
  const std::string text = r.format(0);
  CHECK_THAT(text, Contains("  error_file: <N/A>\n  traceback : " + kNoTraceback + "\n"));
}

// torchrun shows a string "message" as it stands (_format_failure only
// indents the py_callstack of a dict message), and takes the top-level
// "timestamp" of such a file.
TEST_CASE("an error file with a plain string message is shown as written", "[agent]") {
  TempDir dir;
  const std::string file = dir / "0/error.json";
  write_text(file, nlohmann::json{{"message", "RuntimeError: first\nsecond"},
                                  {"timestamp", std::to_string(kT0 - 50)}}
                       .dump());
  ag::FailureReport r;
  r.script_name = "train.py";
  r.error_files = {file};
  r.failures = {failure(0, 101, 1, 0, kT0)};
  const std::string text = r.format(0);
  CHECK_THAT(text, Contains("  time      : " + local_iso(kT0 - 50) + "\n"));
  CHECK_THAT(text, Contains("  error_file: " + file + "\n"));
  CHECK_THAT(text, Contains("  traceback : RuntimeError: first\nsecond\n="));
}

// torchrun names a signal with signal.Signals(n).name: SIGIO (not glibc's
// SIGPOLL) for 29, and "<N/A>" with no suffix on the exitcode line for a
// number Python has no name for, such as SIGRTMIN+1.
TEST_CASE("signals are named as Python's signal module names them", "[agent]") {
  ag::FailureReport r;
  r.script_name = "train.py";
  r.failures = {failure(0, 123, 0, SIGIO, kT0)};
  std::string text = r.format(0);
  CHECK_THAT(text, Contains("  exitcode  : -29 (pid: 123)  (SIGIO)\n"));
  CHECK_THAT(text, Contains("  traceback : Signal 29 (SIGIO) received by PID 123\n"));

  const int rt = SIGRTMIN + 1;
  r.failures = {failure(0, 123, 0, rt, kT0)};
  text = r.format(0);
  const std::string n = std::to_string(rt);
  CHECK_THAT(text, Contains("  exitcode  : -" + n + " (pid: 123) \n"));
  CHECK_THAT(text, Contains("  traceback : Signal " + n + " (<N/A>) received by PID 123\n"));
}

TEST_CASE(
    "printing the report writes it to stderr and the root cause's error file, with its "
    "errorCode, to the agent's error file",
    "[agent]") {
  TempDir dir;
  const std::string file0 = dir / "attempt_0/0/error.json";
  const auto recorded = record_error("ValueError: boom", kCallstack, kT0);
  write_text(file0, recorded.dump());
  const int exit_code = GENERATE(1, 0);
  const int term_signal = exit_code == 0 ? SIGKILL : 0;

  ag::FailureReport r;
  r.script_name = "train.py";
  r.error_files = {file0};
  r.agent_error_file = dir / "agent/error.json";
  fs::create_directories(dir / "agent");
  r.failures = {failure(0, 321, exit_code, term_signal, kT0 + 100)};
  {
    CaptureStderr capture(dir / "stderr");
    r.print(0);
  }
  CHECK(slurp(dir / "stderr") == r.format(0) + "\n");

  auto expected = recorded;
  expected["message"]["errorCode"] = exit_code != 0 ? exit_code : -term_signal;
  const auto written = nlohmann::json::parse(slurp(dir / "agent/error.json"), nullptr, false);
  INFO(written.dump());
  CHECK(written == expected);
}

// torchrun's @record copies the error file of get_first_failure(), the same
// failure the report names as root cause: the earliest timestamp, read from
// the error file when there is one.
TEST_CASE("printing copies the error file of the failure the report names as root cause",
          "[agent]") {
  TempDir dir;
  const std::string file0 = dir / "attempt_0/0/error.json";
  const std::string file1 = dir / "attempt_0/1/error.json";
  write_text(file0, record_error("KeyError: late", kCallstack, kT0 + 500).dump());
  const auto early = record_error("ValueError: early", kCallstack, kT0);
  write_text(file1, early.dump());

  ag::FailureReport r;
  r.script_name = "train.py";
  r.error_files = {file0, file1};
  r.agent_error_file = dir / "agent_error.json";
  // Rank 0 is observed first, but rank 1 recorded its error first.
  r.failures = {failure(0, 101, 1, 0, kT0 + 100), failure(1, 102, 2, 0, kT0 + 200)};
  REQUIRE_THAT(r.format(0), Contains("Root Cause (first observed failure):\n[1]:\n"));
  {
    CaptureStderr capture(dir / "stderr");
    r.print(0);
  }
  auto expected = early;
  expected["message"]["errorCode"] = 2;
  const auto written = nlohmann::json::parse(slurp(dir / "agent_error.json"), nullptr, false);
  INFO(written.dump());
  CHECK(written == expected);
}
