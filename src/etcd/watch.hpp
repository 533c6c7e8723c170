// A watch on one key, on a connection and a thread of its own, that
// outlives the wait that started it: a wait that times out leaves it
// running, so the next wait for the same key (a rendezvous waits in slices
// of a heartbeat interval) costs no request at all. Without that, every
// slice of every waiting agent was a read and a new stream, which at a
// thousand agents was more than one etcd could answer.
//
// The stream is POST /v3/watch with one create_request; its messages are
// read by the codec. The connection is closed to cancel it (etcd has no
// other way over the gateway) when the watch is destroyed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "util/deadline.hpp"

namespace httplib {
class Client;
}

namespace elasticrun::etcd {

class KeyWatch {
 public:
  enum class State {
    kRunning,    // nothing yet
    kPut,        // the key was written at or after the start revision
    kCompacted,  // that revision is compacted away: read the key again
    kFailed,     // the stream ended (failure() says how): start another
  };

  // Starts watching `key` from `start_revision` over `client` (which it
  // owns from now on) on a thread that takes no signals.
  KeyWatch(std::unique_ptr<httplib::Client> client, std::string key, int64_t start_revision);
  ~KeyWatch();  // closes the stream and joins the thread
  KeyWatch(const KeyWatch&) = delete;
  KeyWatch& operator=(const KeyWatch&) = delete;

  // Waits until the state is not kRunning or `dl` passes; returns it.
  State wait(util::Deadline dl);
  const std::string& key() const { return key_; }
  std::string failure() const;

 private:
  void run(int64_t start_revision);
  void finish(State s, std::string why = {});

  std::unique_ptr<httplib::Client> client_;
  const std::string key_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kRunning;  // guarded by mu_
  std::string failure_;            // guarded by mu_
  bool exited_ = false;            // guarded by mu_: run() has returned
  std::thread thread_;
};

}  // namespace elasticrun::etcd
