// An agent's heartbeat: the time, written to the store by one thread every
// interval for as long as the agent lives. A beat older than `missed`
// intervals means the agent is gone (killed, hung, or cut off from the store).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "rendezvous/records.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::rendezvous {

// What a node tells the job in its heartbeat besides the time
// (HeartbeatRecord): the agent's loop stores it, the heartbeat thread loads
// it at each beat.
class BeatProgress {
 public:
  // The straggler monitor's two numbers, lock-free.
  std::atomic<int64_t> step{-1};
  std::atomic<uint32_t> compute_us{0};

  // What elasticctl watch shows: each local rank's step, and the ranks'
  // summed samples per second (nullopt: none report it).
  void set_ranks(std::vector<int64_t> steps, std::optional<double> samples_per_s);
  // Fills r's step, compute, samples and rank steps.
  void load(HeartbeatRecord& r) const;

 private:
  mutable std::mutex mu_;
  std::vector<int64_t> rank_steps_;
  std::optional<double> samples_per_s_;
};

class Heartbeat {
 public:
  // Connects its own client and beats once before returning (so that a
  // freshly joined agent is never mistaken for a dead one). `progress`, when
  // given, must outlive the heartbeat. Throws NetworkError.
  explicit Heartbeat(const RendezvousConfig& config, const BeatProgress* progress = nullptr);
  ~Heartbeat();  // stops the thread (at once; no beat is waited for)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();

  std::string beat() const;

  RendezvousConfig config_;
  const BeatProgress* progress_;
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

}  // namespace elasticrun::rendezvous
