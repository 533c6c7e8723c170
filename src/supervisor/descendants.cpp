#include "supervisor/descendants.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace elasticrun::supervisor {
namespace {

// The parent pid in a stat line: the fourth field, the second after the
// command name, which is in parentheses and may itself hold ") ".
pid_t parent_in_stat(const std::string& stat) {
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  const char* p = stat.c_str() + paren + 1;
  char* end = nullptr;
  while (*p == ' ') ++p;
  if (*p == '\0') return -1;
  ++p;  // the state
  const long ppid = std::strtol(p, &end, 10);
  return end == p ? -1 : static_cast<pid_t>(ppid);
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent, const std::string& proc_root) {
  std::vector<pid_t> out;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    std::ifstream in(proc_root + "/" + e->d_name + "/stat");
    std::string stat;
    // Gone meanwhile: it was nobody's child for long.
    if (!std::getline(in, stat)) continue;
    if (parent_in_stat(stat) == parent) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(dir);
  return out;
}

size_t kill_reparented(std::span<const pid_t> spare, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const pid_t self = ::getpid();
  size_t reaped = 0;
  for (;;) {
    std::vector<pid_t> found = children_of(self);
    std::erase_if(found,
                  [&](pid_t p) { return std::find(spare.begin(), spare.end(), p) != spare.end(); });
    if (found.empty()) return reaped;
    // All first, then reap: they die in parallel.
    for (pid_t pid : found) ::kill(pid, SIGKILL);
    for (pid_t pid : found) {
      for (;;) {
        const pid_t got = ::waitpid(pid, nullptr, WNOHANG);
        if (got == pid) {
          ++reaped;
          break;
        }
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) break;  // ECHILD: reaped by someone after all
        if (std::chrono::steady_clock::now() > deadline) return reaped;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (std::chrono::steady_clock::now() > deadline) return reaped;
  }
}

}  // namespace elasticrun::supervisor
