// Store errands run in order on a thread of their own, over a connection
// only that thread uses, so that the attempt's loop never waits on the
// store: the loop posts "end the round with this record" and goes on
// stopping its workers; the courier does the round trips.
//
// An errand gets the courier's connection and catches its own errors (a
// store that is gone is news for the errand's owner, not for the courier).
// The destructor runs what is queued, then stops; drain() waits for the
// errands posted so far (the agent's main thread, before it rejoins, so
// that the record of the round's end is in the store before it looks).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "rendezvous/heartbeat.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::agent {

template <class Connection>
class Courier {
 public:
  using Errand = std::function<void(Connection&)>;

  explicit Courier(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {
    thread_ = util::start_quiet_thread([this] { run(); });
  }
  ~Courier() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Courier(const Courier&) = delete;
  Courier& operator=(const Courier&) = delete;

  // Any thread.
  void post(Errand errand) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(errand));
      ++posted_;
    }
    cv_.notify_all();
  }

  // Returns once every errand posted before the call has run.
  void drain() {
    std::unique_lock lock(mu_);
    const uint64_t target = posted_;
    cv_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      Errand e = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      e(*connection_);
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  std::unique_ptr<Connection> connection_;  // the courier thread's alone
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Errand> queue_;
  uint64_t posted_ = 0;
  uint64_t done_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace elasticrun::agent
