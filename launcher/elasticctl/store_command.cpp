#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/launch_config.hpp"
#include "commands.hpp"
#include "store/server.hpp"
#include "store/standby.hpp"
#include "util/quiet_thread.hpp"
#include "util/secret.hpp"
#include "util/socket.hpp"

namespace elasticrun::ctlcmd {
namespace {

// --standby-of: a follower of the primary, and the promotion when it is lost.
class Standby {
 public:
  Standby(store::Server& server, const cli::HostPort& primary, const std::string& secret)
      : server_(server) {
    store::StandbyFollower::Options o;
    o.primary_host = primary.host;
    o.primary_port = static_cast<uint16_t>(primary.port);
    o.endpoint = util::format_endpoint(server.host(), server.port());
    o.secret = secret;
    follower_ = std::make_unique<store::StandbyFollower>(o);
    watcher_ = util::start_quiet_thread([this] { watch(); });
  }
  ~Standby() {
    stop_ = true;
    watcher_.join();
  }

 private:
  void watch() {
    while (!stop_) {
      if (!follower_->wait_lost(std::chrono::milliseconds(200))) continue;
      if (follower_->synced()) server_.promote(follower_->take());
      return;  // the follower's log says why; unsynced, it stays a standby
    }
  }
  store::Server& server_;
  std::unique_ptr<store::StandbyFollower> follower_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

int run_store(store::ServerOptions options, const std::optional<std::string>& secret_file,
              const std::string& standby_of) {
  options.secret = util::job_secret(secret_file, "--secret-file").value_or("");
  std::optional<cli::HostPort> primary;
  if (!standby_of.empty()) primary = cli::parse_endpoint("--standby-of", standby_of, -1);
  options.standby = primary.has_value();
  store::Server server(options);
  server.bind();
  // Handlers first: whoever reads the line below may signal us at once.
  server.stop_on_signals({SIGINT, SIGTERM});
  std::unique_ptr<Standby> standby;
  if (primary) standby = std::make_unique<Standby>(server, *primary, options.secret);
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
  auto standby_of = std::make_shared<std::string>();
  cmd->add_option("--standby-of", *standby_of,
                  "Serve as the standby of the store at HOST:PORT: a copy it keeps up to date, "
                  "which serves nobody until that store's host is lost, then takes over "
                  "(docs/protocol.md, \"Standby\"); give its endpoint to the agents as "
                  "--rdzv-conf standby_endpoint=HOST:PORT");
  return {cmd, [o, secret_file, standby_of] { return run_store(*o, *secret_file, *standby_of); }};
}

}  // namespace elasticrun::ctlcmd
