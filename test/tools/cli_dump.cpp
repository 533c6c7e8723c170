// cli_dump [FLAGS] TRAINING_SCRIPT [ARGS]: parses a launch command line the
// way elasticrun does and prints the resulting LaunchConfig as one JSON line.
// The integration suite (test_cli_parity.py) compares it with what torchrun's
// own parser makes of the same command line and environment.
//
// --nproc-per-node auto/cpu/gpu resolve against CLI_DUMP_CPU_COUNT and
// CLI_DUMP_GPU_COUNT when set (so the test can use torch's own counts), else
// against the CPUs this process may run on and no GPUs.
//
// Exit status: 0 after printing the JSON (or the help text), 2 with the
// message on stderr for a ConfigError.
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"

extern char** environ;

namespace {

int count_from_env(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  try {
    const auto config = elasticrun::cli::parse_launch_args(
        args, env, count_from_env("CLI_DUMP_CPU_COUNT", usable_cpus()),
        count_from_env("CLI_DUMP_GPU_COUNT", 0));
    std::cout << elasticrun::cli::to_json(config) << "\n";
    return 0;
  } catch (const elasticrun::cli::HelpRequested& help) {
    std::cout << help.text;
    return 0;
  } catch (const elasticrun::ConfigError& e) {
    std::cerr << "cli_dump: " << e.what() << "\n" << elasticrun::cli::usage();
    return 2;
  }
}
