#include "agent/embedded_store.hpp"

#include "util/quiet_thread.hpp"

namespace elasticrun::agent {

EmbeddedStore::EmbeddedStore(const std::string& host, int port, const std::string& secret,
                             bool standby) {
  store::ServerOptions options;
  options.secret = secret;
  options.standby = standby;
  options.host = host;
  options.port = static_cast<uint16_t>(port);
  server_ = std::make_unique<store::Server>(options);
  server_->bind();
  // The agent loop's signals are not the store thread's (util/quiet_thread).
  thread_ = util::start_quiet_thread([this] { server_->run(); });
}

EmbeddedStore::~EmbeddedStore() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace elasticrun::agent
