#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "store/server.hpp"
#include "util/secret.hpp"

namespace elasticrun::ctlcmd {
namespace {

int run_store(store::ServerOptions options, const std::optional<std::string>& secret_file) {
  options.secret = util::job_secret(secret_file, "--secret-file").value_or("");
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

Command add_store(CLI::App& app) {
  auto o = std::make_shared<store::ServerOptions>();
  auto secret_file = std::make_shared<std::optional<std::string>>();
  // The default of torchrun's --rdzv-endpoint, the store's main use.
  o->port = 29400;
  auto* cmd = app.add_subcommand(
      "store",
      "Run a standalone store that agents and PyTorch workers share (c10d TCPStore protocol)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port,
                  "Port to listen on; 0 picks a free one (the port is printed either way)")
      ->capture_default_str();
  cmd->add_option("--max-key-size", o->limits.max_key_size, "Largest key in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-value-size", o->limits.max_value_size, "Largest value in bytes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-keys-per-request", o->limits.max_keys_per_request,
                  "Most keys one CHECK/WAIT/MULTI_GET/MULTI_SET may name")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-request-size", o->limits.max_request_size,
                  "Most bytes of keys and values in one request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-pending-reply-bytes", o->max_pending_reply_bytes,
                  "Replies queued for a client that does not read them before the store stops "
                  "reading its requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-buffered-bytes", o->max_buffered_bytes,
                  "Most bytes of partial requests buffered across all clients")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--secret-file", *secret_file,
                  "Serve only clients that prove they hold the job secret in this file "
                  "(default: the file $ELASTICRUN_SECRET_FILE names; none: no secret). "
                  "PyTorch's clients cannot: give a store with a secret to agents only");
  return {cmd, [o, secret_file] { return run_store(*o, *secret_file); }};
}

}  // namespace elasticrun::ctlcmd
