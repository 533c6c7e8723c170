// The store server: a single-threaded libuv event loop that serves the
// c10d TCPStore protocol to agents, `elasticctl` and PyTorch workers.
//
// One loop thread owns every socket and the key-value state; the only
// cross-thread entry point is stop(), which wakes the loop through a
// uv_async handle. A client that breaks the wire format or a limit loses its
// own connection, with a log line naming its address; nobody else notices.
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/protocol.hpp"
#include "store/state.hpp"

namespace elasticrun::store {

struct ServerOptions {
  // Address to listen on: a numeric IPv4/IPv6 address or a host name.
  std::string host = "0.0.0.0";
  // 0 picks a free port; port() tells which after bind().
  uint16_t port = 0;
  Limits limits;
  // Bytes of partial requests buffered across all connections. Past it, the
  // connection that would exceed it is closed: memory stays bounded whatever
  // clients send.
  size_t max_buffered_bytes = 1024ull * 1024 * 1024;
  // Replies queued for one client that does not read them. Past it, the
  // server stops reading that client's requests until it catches up.
  size_t max_pending_reply_bytes = 128 * 1024 * 1024;
  int listen_backlog = 4096;
  // The job secret (util/secret.hpp); empty: none. With one, every
  // connection must pass the challenge and response of store/auth.hpp
  // before any other request.
  std::string secret;
  // Starts as a standby (store/replica.hpp): it serves no client until
  // promote(); a client's PING is answered with kStandbyWord and its
  // connection closed, so that it tries the next endpoint it knows.
  bool standby = false;
  // A standby that acknowledges nothing this long while changes wait for it
  // is detached (its host may be gone without closing the connection), and
  // the store serves on alone.
  std::chrono::milliseconds standby_ack_timeout{std::chrono::seconds(5)};
};

struct ServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t connections_dropped = 0;  // closed by the server for bad input (refused ones too)
  uint64_t connections_refused = 0;  // of those, failed or skipped the handshake
  uint64_t requests = 0;
  // The standby (store/replica.hpp): one attached now; how many ever did;
  // changes sent to them.
  bool has_standby = false;
  uint64_t standbys_attached = 0;
  uint64_t changes_replicated = 0;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens. Throws NetworkError naming the address on failure
  // (address in use, permission denied, unknown host).
  void bind();
  // The port bound (after bind()).
  uint16_t port() const;
  const std::string& host() const;

  // Stops the loop when one of these signals arrives (elasticctl uses
  // SIGINT and SIGTERM). Call before run(), from the thread that runs it.
  void stop_on_signals(const std::vector<int>& signals);

  // Runs the loop on the calling thread until stop() or a stop signal.
  // Closes every connection before returning.
  void run();

  // Asks the loop to stop; safe from any thread, idempotent, and a stop
  // requested before run() makes run() return at once.
  void stop();

  // A standby takes over: `data` (its primary's, as store::StandbyFollower
  // kept it) becomes the store's, and it serves clients from then on.
  // Safe from any thread; a server that is not a standby ignores it.
  void promote(std::vector<Change> data);
  // Serving clients: not a standby, or promoted.
  bool serving() const;

  // Counters, readable from any thread.
  ServerStats stats() const;
  // The signal that stopped the loop, or 0.
  int stop_signal() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace elasticrun::store
