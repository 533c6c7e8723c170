#include "agent/embedded_store.hpp"

#include <csignal>

namespace elasticrun::agent {

EmbeddedStore::EmbeddedStore(const std::string& host, int port) {
  store::ServerOptions options;
  options.host = host;
  options.port = static_cast<uint16_t>(port);
  server_ = std::make_unique<store::Server>(options);
  server_->bind();
  // The store thread must never take the agent's signals: they are the
  // agent loop's (SIGCHLD, forwarded signals). Block them all in the thread.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { server_->run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

EmbeddedStore::~EmbeddedStore() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace elasticrun::agent
