// elasticctl's subcommands. Each adds itself to the app, its flags bound to
// options it owns, and returns how to run it once the command line parsed;
// the main (launcher/elasticctl.cpp) only parses, runs the one given and
// maps errors to exit statuses (ConfigError 2, any other Error 1).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace elasticrun::ctlcmd {

inline constexpr int kExitOk = 0;

struct Command {
  CLI::App* app;             // the subcommand
  std::function<int()> run;  // its exit status; throws Error
};

// `store`: a standalone TCPStore-compatible store server.
Command add_store(CLI::App& app);
// `scale`, `release`, `readmit`, `status`, `watch`: a running job, through
// its rendezvous store (docs/elasticctl.md).
std::vector<Command> add_job_commands(CLI::App& app);
// `plan`: per-GPU memory and micro-batches at each world size (docs/planner.md).
Command add_plan(CLI::App& app);
// `simulate`: the capacity simulator (docs/simulator.md).
Command add_simulate(CLI::App& app);
// `timeline`: a run drawn from its event logs.
Command add_timeline(CLI::App& app);

}  // namespace elasticrun::ctlcmd
