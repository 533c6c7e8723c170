// Snapshots between agents (docs/memory-tier.md): each agent serves its
// tier's adopted snapshots over HTTP (cpp-httplib), and an agent that lacks
// the snapshot its next round restores fetches it from a member that holds
// it. The paths, made and parsed here only:
//   GET /memory/v1/snapshots/<name>/manifest       the manifest (snapshot.hpp)
//   GET /memory/v1/snapshots/<name>/files/<file>   the file's bytes
// A fetched file whose size or CRC32C differs from the holder's manifest
// is refused, and the snapshot with it: nothing half-fetched or wrong is
// ever published in the tier.
//
// The server binds to the agent's address (its workers' peers reach it
// there), reads files from the tier on its own threads, never on the
// agent's loop, and answers only GETs of adopted snapshots. With the job
// secret it answers only requests that prove it (util/http_auth.hpp: a
// nonce from GET /auth/nonce, then the signed GET); without one, anyone
// who can reach the port can read the training state.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "memory/tier.hpp"
#include "util/http_auth.hpp"
#include "util/result.hpp"

namespace httplib {
class Server;
}

namespace elasticrun::memory {

class PeerServer {
 public:
  // Binds host:0 and serves `tier` (which must outlive it), to requests
  // signed with `secret` when it is not empty. Throws NetworkError when the
  // address cannot be bound.
  PeerServer(const std::string& host, Tier& tier, const std::string& secret = {});
  ~PeerServer();  // stops serving; a transfer under way is cut
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  int port() const { return port_; }

 private:
  const std::string secret_;
  util::NonceBook nonces_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> loop_ended_{false};
};

struct FetchOptions {
  // For each connection's silence, not the whole transfer.
  std::chrono::seconds timeout{30};
  // The most bytes a second the fetch takes (0: as fast as it can): a
  // replication while training runs leaves the network to the training.
  uint64_t bytes_per_second = 0;
  // Set by another thread: the fetch stops at its next chunk, leaving
  // nothing in the tier.
  const std::atomic<bool>* cancel = nullptr;
  // The job secret, for a peer that asks for it (every agent of a job with
  // one); empty: none.
  std::string secret = {};
};

// Fetches snapshot `name` from the agent serving at host:port into `tier`
// and publishes it there. An error names the peer and what was wrong.
util::Status fetch_snapshot(const std::string& host, int port, const std::string& name, Tier& tier,
                            const FetchOptions& options = {});

}  // namespace elasticrun::memory
