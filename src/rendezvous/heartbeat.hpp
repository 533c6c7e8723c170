// An agent's heartbeat: the time, written to the store by one thread every
// interval for as long as the agent lives. A beat older than `missed`
// intervals means the agent is gone (killed, hung, or cut off from the store).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "rendezvous/rendezvous.hpp"

namespace elasticrun::rendezvous {

class Heartbeat {
 public:
  // Connects its own client and beats once before returning (so that a
  // freshly joined agent is never mistaken for a dead one). Throws NetworkError.
  explicit Heartbeat(const RendezvousConfig& config);
  ~Heartbeat();  // stops the thread (at once; no beat is waited for)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();

  RendezvousConfig config_;
  StoreClient client_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Wall-clock milliseconds since the epoch: what a beat holds (HeartbeatRecord).
int64_t now_unix_ms();
// True when the beat is older than `limit` (or not a time at all).
bool heartbeat_stale(const std::string& beat, int64_t now_ms, std::chrono::milliseconds limit);

// Runs f on a new thread that blocks every signal: the agent's loop owns
// signals, and a helper thread must never take one.
std::thread start_quiet_thread(std::function<void()> f);

}  // namespace elasticrun::rendezvous
