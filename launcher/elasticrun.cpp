// elasticrun: the per-node launcher, a drop-in for torchrun. Parses the
// command line, plans the agent (src/agent/launch_plan) and runs it; every
// error becomes an exit code and one line here.
#include <cstdio>
#include <iostream>

#include "agent/launch_plan.hpp"
#include "agent/worker_env.hpp"
#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"

namespace {
constexpr int kExitUsage = 2;
}  // namespace

int main(int argc, char** argv) {
  using namespace elasticrun;
  const auto env = agent::current_environment();
  agent::AgentConfig config;
  try {
    const cli::LaunchConfig launch =
        cli::parse_launch_args(std::vector<std::string>(argv + 1, argv + argc), env,
                               agent::usable_cpu_count(), agent::visible_gpu_count(env));
    config = agent::plan_agent(launch, env);
  } catch (const cli::HelpRequested& h) {
    std::fputs(h.text.c_str(), stdout);
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "elasticrun: error: " << e.what() << "\n" << cli::usage();
    return kExitUsage;
  }
  try {
    return agent::run_agent(config);
  } catch (const ConfigError& e) {
    std::cerr << "elasticrun: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "elasticrun: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "elasticrun: internal error: " << e.what() << "\n";
    return 1;
  }
}
