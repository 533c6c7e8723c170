// A store server hosted inside the agent, on a thread of its own.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/server.hpp"

namespace elasticrun::agent {

class EmbeddedStore {
 public:
  // Binds host:port (0: a free port) and starts serving; with a `secret`,
  // only to clients that prove they hold it (store/auth.hpp). A `standby`
  // serves nobody until promote() (store/replica.hpp). Throws NetworkError.
  EmbeddedStore(const std::string& host, int port, const std::string& secret = {},
                bool standby = false);
  ~EmbeddedStore();  // stops the loop and joins the thread
  EmbeddedStore(const EmbeddedStore&) = delete;
  EmbeddedStore& operator=(const EmbeddedStore&) = delete;

  int port() const { return server_->port(); }
  // Clients connected now (any thread).
  uint64_t open_connections() const { return server_->stats().connections_open; }
  // Asks the store to stop without waiting for it; the destructor joins.
  void request_stop() { server_->stop(); }
  // A standby takes over with its primary's data (store::Server::promote).
  void promote(std::vector<store::Change> data) { server_->promote(std::move(data)); }
  bool serving() const { return server_->serving(); }

 private:
  std::unique_ptr<store::Server> server_;
  std::thread thread_;
};

}  // namespace elasticrun::agent
