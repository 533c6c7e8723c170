#include "agent/stacks.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "supervisor/spawn.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

using Clock = std::chrono::steady_clock;

std::string find_program(const std::string& name, const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const auto candidate = std::filesystem::path(path.substr(start, end - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The agent's line before each dump: faulthandler writes no header of its own.
void append_header(const StackTarget& t, const char* how) {
  std::ofstream out(t.file, std::ios::app);
  out << "=== elasticrun: Python stacks of local rank " << t.local_rank << " (pid " << t.pid
      << ") at " << now_text() << ", by " << how << " ===\n";
}

int64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}

}  // namespace

bool faulthandler_dumps_written(const std::vector<StackResult>& results,
                                const std::vector<std::string>& files,
                                std::vector<int64_t>& last_sizes) {
  bool all = true;
  last_sizes.resize(results.size(), -1);
  for (size_t i = 0; i < results.size(); ++i) {
    const StackResult& r = results[i];
    if (r.how != "faulthandler") continue;
    const auto lr = static_cast<size_t>(r.local_rank);
    const int64_t now = lr < files.size() ? file_size(files[lr]) : -1;
    all = all && now > r.size_before && now == last_sizes[i];
    last_sizes[i] = now;
  }
  return all;
}

int stack_signal() {
  return SIGRTMIN + 4;
}

bool process_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state
  // follows the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state == 'T' || state == 't';
}

std::vector<StackResult> capture_stacks(const std::vector<StackTarget>& targets,
                                        const std::string& path, std::chrono::milliseconds budget) {
  auto log = util::logger("health");
  const std::string py_spy = find_program("py-spy", path);
  std::vector<StackResult> results;
  std::vector<std::pair<pid_t, size_t>> running;  // py-spy's pid, index into results
  for (const auto& t : targets) {
    StackResult r;
    r.local_rank = t.local_rank;
    r.pid = t.pid;
    r.stopped = process_stopped(t.pid);
    // A stopped process runs no signal handler, and continuing it could let
    // the job run on for a moment: py-spy reads it as it is, or nothing does.
    if (t.registered && !r.stopped) {
      append_header(t, "faulthandler");
      r.size_before = file_size(t.file);
      ::kill(t.pid, stack_signal());
      r.how = "faulthandler";
    } else if (!py_spy.empty()) {
      append_header(t, "py-spy");
      const int fd = ::open(t.file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      supervisor::SpawnSpec spec;
      spec.argv = {py_spy, "dump", "--nonblocking", "--pid", std::to_string(t.pid)};
      spec.env = {"PATH=" + path};
      spec.stdout_fd = fd;
      spec.stderr_fd = fd;
      auto pid = supervisor::spawn(spec);
      if (fd >= 0) ::close(fd);
      if (pid.is_ok()) {
        running.emplace_back(pid.value(), results.size());
        r.how = "py-spy";
      } else {
        r.how = "none: " + pid.status().message();
      }
    } else if (r.stopped) {
      r.how = "none: the process is stopped and py-spy is not on PATH";
    } else {
      r.how = "none: the worker does not use the SDK and py-spy is not on PATH";
    }
    results.push_back(r);
  }
  const auto until = Clock::now() + budget;
  while (!running.empty()) {
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t got = ::waitpid(it->first, &status, WNOHANG);
      if (got == it->first || (got < 0 && errno != EINTR)) {
        if (got == it->first && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          results[it->second].how = "py-spy failed (see the stacks file)";
        }
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    if (running.empty()) break;
    if (Clock::now() >= until) {
      for (const auto& [pid, index] : running) {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        results[index].how = "py-spy timed out";
        log->warn("py-spy did not dump local rank {} within {} ms", results[index].local_rank,
                  budget.count());
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return results;
}

}  // namespace elasticrun::agent
