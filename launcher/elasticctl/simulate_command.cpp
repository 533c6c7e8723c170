#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "elasticrun/errors.hpp"
#include "sim/controller.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "sim/trace.hpp"

namespace elasticrun::ctlcmd {
namespace {

struct SimulateOptions {
  std::string trace;
  std::string json_out;
  std::vector<std::string> policies = sim::controller_names();
  std::optional<uint64_t> seed;
};

int run_simulate(const SimulateOptions& o) {
  const sim::Trace trace = sim::load_trace(o.trace);
  const uint64_t seed = o.seed.value_or(trace.seed);
  const auto started = std::chrono::steady_clock::now();
  const std::vector<sim::RunResult> runs = sim::compare(trace, seed, o.policies);
  const auto elapsed = std::chrono::steady_clock::now() - started;
  const std::string table = sim::format_table(trace, seed, runs);
  std::fwrite(table.data(), 1, table.size(), stdout);
  // On stderr: the table and the JSON stay the same from run to run.
  std::fprintf(stderr, "elasticctl simulate: %zu policies in %.3f s\n", runs.size(),
               std::chrono::duration<double>(elapsed).count());
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out, std::ios::binary | std::ios::trunc);
    out << sim::format_json(trace, seed, runs);
    out.flush();
    if (!out) throw Error("cannot write " + o.json_out);
  }
  return kExitOk;
}

}  // namespace

Command add_simulate(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Play a capacity trace against the elastic policy and the policies it replaces; print a "
      "table and optionally write JSON (docs/simulator.md)");
  cmd->add_option("trace", o->trace, "The trace file")->required();
  cmd->add_option("--json", o->json_out, "Write the results as JSON to this file");
  cmd->add_option("--policies", o->policies, "Comma-separated policies to compare")
      ->delimiter(',')
      ->check(CLI::IsMember(sim::controller_names()))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed,
                  "Seed for the trace's random failures and notices (default: its own)");
  return {cmd, [o] { return run_simulate(*o); }};
}

}  // namespace elasticrun::ctlcmd
