// elasticctl: everything that is not launching. For now: `elasticctl store`,
// a standalone TCPStore-compatible store server.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "elasticrun/errors.hpp"
#include "store/server.hpp"
#include "util/logging.hpp"

namespace {

using namespace elasticrun;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int run_store(const store::ServerOptions& options) {
  store::Server server(options);
  server.bind();
  // Handlers first: whoever reads the line below may signal us at once.
  server.stop_on_signals({SIGINT, SIGTERM});
  // Scripts (and our tests) read the chosen port from this line.
  std::printf("elasticctl store: listening on %s:%u\n", server.host().c_str(), server.port());
  std::fflush(stdout);
  server.run();
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"elasticctl: control and support commands for elasticrun jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "elasticctl 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(
          CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}));

  store::ServerOptions store_opts;
  // The default of torchrun's --rdzv-endpoint, the store's main use.
  store_opts.port = 29400;
  auto* store_cmd = app.add_subcommand(
      "store",
      "Run a standalone store that agents and PyTorch workers share (c10d TCPStore protocol)");
  store_cmd->add_option("--host", store_opts.host, "Address to listen on")->capture_default_str();
  store_cmd
      ->add_option("--port", store_opts.port,
                   "Port to listen on; 0 picks a free one (the port is printed either way)")
      ->capture_default_str();
  store_cmd->add_option("--max-key-size", store_opts.limits.max_key_size, "Largest key in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-value-size", store_opts.limits.max_value_size, "Largest value in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-keys-per-request", store_opts.limits.max_keys_per_request,
                   "Most keys one CHECK/WAIT/MULTI_GET/MULTI_SET may name")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-request-size", store_opts.limits.max_request_size,
                   "Most bytes of keys and values in one request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-pending-reply-bytes", store_opts.max_pending_reply_bytes,
                   "Replies queued for a client that does not read them before the store stops "
                   "reading its requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  store_cmd
      ->add_option("--max-buffered-bytes", store_opts.max_buffered_bytes,
                   "Most bytes of partial requests buffered across all clients")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "elasticctl: " << e.what() << "\n\n" << app.help();
    return kExitUsage;
  }

  try {
    util::set_log_level(log_level);
    if (store_cmd->parsed()) return run_store(store_opts);
  } catch (const ConfigError& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}
