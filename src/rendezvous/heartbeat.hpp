// An agent's heartbeat: a counter in the store that one thread increments
// every interval for as long as the agent lives. The leader reads every
// member's counter; a counter that stops moving for `missed` intervals means
// the agent is gone (killed, hung, or cut off from the store).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
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

// Tracks counters that must keep moving: feed it each observation; it says
// which have been still for longer than the limit.
class StallDetector {
 public:
  explicit StallDetector(std::chrono::milliseconds limit) : limit_(limit) {}
  // Returns true when `value` has not changed for longer than the limit.
  bool stalled(const std::string& name, int64_t value,
               std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  struct Seen {
    int64_t value;
    std::chrono::steady_clock::time_point since;
  };
  std::chrono::milliseconds limit_;
  std::map<std::string, Seen> seen_;
};

// Runs f on a new thread that blocks every signal: the agent's loop owns
// signals, and a helper thread must never take one.
std::thread start_quiet_thread(std::function<void()> f);

}  // namespace elasticrun::rendezvous
