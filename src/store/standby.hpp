// A standby's half of the stream (store/replica.hpp): it connects to the
// primary as any client (the job secret's handshake included), sends
// REPLICATE naming where it serves, and keeps a copy of the primary's data
// on a thread of its own, acknowledging each batch of changes as soon as it
// is applied (the primary holds its replies until then).
//
// The stream's end is not yet the primary's loss: the primary also closes
// a standby that fell behind. So when it ends the follower tries the
// primary's port; a primary that answers is followed again from a fresh
// snapshot (the copy counts as stale until it is whole), and only one that
// does not ends the follower, with its copy ready for Server::promote. A
// stream silent for `silence` is checked the same way (a host that
// vanished sends no FIN). Before its first whole copy the follower waits
// for the primary however long it takes: it has nothing to take over with.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/store_client.hpp"
#include "store/state.hpp"

namespace elasticrun::util {
class Socket;
}

namespace elasticrun::store {

class StandbyFollower {
 public:
  struct Options {
    std::string primary_host;
    uint16_t primary_port = 0;
    std::string endpoint;  // where this standby serves, for the primary's log
    std::string secret;    // the job's, when its store asks for one
    // How long a stream may be silent before the primary is tried.
    std::chrono::milliseconds silence{std::chrono::seconds(10)};
    // How long the primary is tried (a whole handshake) before it counts as
    // lost.
    std::chrono::milliseconds probe_timeout{std::chrono::seconds(1)};
  };

  // Starts following at once.
  explicit StandbyFollower(Options options);
  // Stops following (within a fraction of a second).
  ~StandbyFollower();
  StandbyFollower(const StandbyFollower&) = delete;
  StandbyFollower& operator=(const StandbyFollower&) = delete;

  // Waits until the primary is lost or `timeout` passed; true when lost.
  bool wait_lost(std::chrono::milliseconds timeout);
  // Why it ended, once it has.
  std::string why() const;
  // A whole snapshot arrived (from the primary it follows now, or followed last).
  bool synced() const { return synced_.load(); }
  // Changes applied since the last snapshot began.
  uint64_t applied() const { return applied_.load(); }
  // Once lost: the copy of the primary's data, as changes (for
  // Server::promote); empty when no snapshot ever arrived whole.
  std::vector<Change> take();

 private:
  void run();
  // One stream from connect to its end; returns why it ended.
  std::string follow_once();
  bool primary_answers() const;
  static util::Socket take_socket(StoreClient& client);  // client.cpp: it knows the Impl

  const Options options_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> synced_{false};
  std::atomic<uint64_t> applied_{0};
  State copy_;             // the thread's until lost_; then take()'s
  uint64_t store_id_ = 0;  // the thread's: the primary the copy is of
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool lost_ = false;  // guarded by mu_
  std::string why_;    // guarded by mu_
  std::thread thread_;
};

}  // namespace elasticrun::store
