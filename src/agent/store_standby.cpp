#include "agent/store_standby.hpp"

#include "agent/addresses.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"
#include "util/socket.hpp"

namespace elasticrun::agent {

StoreStandby::StoreStandby(const rendezvous::RendezvousConfig& c) {
  store_ = std::make_unique<EmbeddedStore>(resolve_numeric(c.standby_host), c.standby_port,
                                           c.secret, /*standby=*/true);
  store::StandbyFollower::Options o;
  o.primary_host = c.store_host;
  o.primary_port = static_cast<uint16_t>(c.store_port);
  o.endpoint = util::format_endpoint(c.standby_host, static_cast<uint16_t>(c.standby_port));
  o.secret = c.secret;
  // A live job changes the store every heartbeat: a silence of several is
  // worth a look at the store's port.
  o.silence = c.heartbeat_interval * c.missed_heartbeats;
  follower_ = std::make_unique<store::StandbyFollower>(o);
  util::logger("agent")->info("serving the rendezvous store's standby on {}", o.endpoint);
  watcher_ = util::start_quiet_thread([this] { watch(); });
}

StoreStandby::~StoreStandby() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
  follower_.reset();
  store_.reset();
}

void StoreStandby::watch() {
  while (!stop_) {
    if (!follower_->wait_lost(std::chrono::milliseconds(200))) continue;
    auto log = util::logger("agent");
    if (!follower_->synced()) {
      log->error(
          "the rendezvous store's host is lost ({}) before this standby had its data: "
          "it cannot take over",
          follower_->why());
      return;
    }
    log->warn("the rendezvous store's host is lost ({}): this node's standby takes over",
              follower_->why());
    store_->promote(follower_->take());
    return;
  }
}

}  // namespace elasticrun::agent
