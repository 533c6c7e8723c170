// elasticctl: everything that is not launching. `store`, a standalone
// TCPStore-compatible store server; `scale`, `release`, `readmit`, `status`
// and `watch`, which talk to a running job through its rendezvous store
// (docs/elasticctl.md); `simulate`, the capacity simulator
// (docs/simulator.md); `timeline`, a run drawn from its event logs. Each
// command is in launcher/elasticctl/.
#include <CLI/CLI.hpp>
#include <iostream>

#include "elasticctl/commands.hpp"
#include "elasticrun/errors.hpp"
#include "elasticrun/version.hpp"
#include "util/logging.hpp"

int main(int argc, char** argv) {
  using namespace elasticrun;
  CLI::App app{"elasticctl: control and support commands for elasticrun jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "elasticctl " ELASTICRUN_VERSION);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(
          CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}));
  std::vector<ctlcmd::Command> commands = {ctlcmd::add_store(app)};
  for (auto& c : ctlcmd::add_job_commands(app)) commands.push_back(std::move(c));
  commands.push_back(ctlcmd::add_plan(app));
  commands.push_back(ctlcmd::add_simulate(app));
  commands.push_back(ctlcmd::add_timeline(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The usage of the subcommand the error is about, when there is one.
    const auto parsed = app.get_subcommands();
    std::cerr << "elasticctl: " << e.what() << "\n\n"
              << (parsed.empty() ? app.help() : parsed.front()->help());
    return 2;
  }
  try {
    util::set_log_level(log_level);
    for (auto& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const ConfigError& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
