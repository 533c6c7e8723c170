// The rendezvous store's standby, on the agent of its host (--rdzv-conf
// standby_endpoint; docs/protocol.md, "Standby"): a store bound to the
// standby's endpoint that serves nobody, kept equal to the rendezvous
// store by a follower, and a thread that promotes it once the follower
// finds the store's host lost. From then on every agent's connections
// (rendezvous::connect_store) are served here and the job goes on: its
// rounds, heartbeats, exclusions and counters are all in the copy.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "agent/embedded_store.hpp"
#include "rendezvous/rendezvous.hpp"
#include "store/standby.hpp"

namespace elasticrun::agent {

class StoreStandby {
 public:
  // Binds the standby's endpoint (throws NetworkError when it is taken:
  // another agent of this host serves it) and starts following the store.
  explicit StoreStandby(const rendezvous::RendezvousConfig& c);
  ~StoreStandby();  // stops following and serving
  StoreStandby(const StoreStandby&) = delete;
  StoreStandby& operator=(const StoreStandby&) = delete;

  // It took over: it is the rendezvous store now.
  bool serving() const { return store_->serving(); }
  uint64_t open_connections() const { return store_->open_connections(); }

 private:
  void watch();

  std::unique_ptr<EmbeddedStore> store_;
  std::unique_ptr<store::StandbyFollower> follower_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace elasticrun::agent
