// elasticrun's command line, parsed the way torchrun's argparse parser does.
//
// Compatibility, in torchrun's own terms (torch/distributed/run.py, Python 3.11 argparse):
// - Flags come before TRAINING_SCRIPT; the first argument that is not a flag
//   (or the argument after a first "--") is the script, and everything after it
//   belongs to the script, flags included. A "--" right after the script is
//   dropped, as argparse drops it.
// - --flag VALUE, --flag=VALUE, dash and underscore spellings, unique prefixes
//   of long flags (--nnode), short flags -m, -r, -t, -h, clustered (-mr3, -r=3).
//   A value may start with '-' only if it is a negative number or has a space in
//   it (argparse's rule); --flag=-x always works.
// - A flag given twice: the last one wins.
// - A flag that is not given is read from PET_<DEST> (PET_NPROC_PER_NODE),
//   except --logs-specs, --numa-binding, --print-completion and elasticrun's
//   own elastic group (cli/elastic_parse.hpp); a switch's PET_ value is an
//   integer, non-zero meaning on.
// - Derivations in run()'s order: --standalone; a single-node static job
//   without a master port or endpoint becomes c10d on localhost:0 with a
//   random id; master port 29500; the static endpoint MASTER_ADDR:MASTER_PORT.
#pragma once

#include <exception>
#include <map>
#include <string>
#include <vector>

#include "cli/launch_config.hpp"

namespace elasticrun::cli {

// -h/--help, or --print-completion: the launcher prints `text` to stdout and exits 0.
struct HelpRequested : std::exception {
  explicit HelpRequested(std::string t) : text(std::move(t)) {}
  const char* what() const noexcept override { return "help requested"; }
  std::string text;
};

// `args` excludes argv[0]; `env` is the launcher's environment; cpu_count and
// gpu_count resolve --nproc-per-node auto/cpu/gpu (cpu_count: the CPUs this
// process may run on). Throws HelpRequested, or ConfigError with a one-line
// message naming the flag (or PET_ variable) and the bad value.
LaunchConfig parse_launch_args(const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& env, int cpu_count,
                               int gpu_count);

// Printed after the message of a ConfigError.
std::string usage();

}  // namespace elasticrun::cli
