#include "agent/hook.hpp"

#include <sys/wait.h>

#include <cerrno>

#include "agent/worker_env.hpp"
#include "supervisor/spawn.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {

int run_hook(const char* what, const std::vector<std::string>& cmd,
             const std::map<std::string, std::string>& env) {
  auto log = util::logger("agent");
  supervisor::SpawnSpec spec;
  spec.argv = cmd;
  spec.env = to_envp(env);
  auto pid = supervisor::spawn(spec);
  if (!pid.is_ok()) {
    log->error("{} script: {}", what, pid.status().message());
    return 127;
  }
  int status = 0;
  while (::waitpid(pid.value(), &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) log->warn("{} script {} exited with {}", what, cmd[0], code);
  return code;
}

}  // namespace elasticrun::agent
