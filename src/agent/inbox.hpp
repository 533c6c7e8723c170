// Messages from other threads to a running attempt: each runs on the
// attempt's loop, in the order posted, with the attempt's control.
//
// The helper threads of a round (its watch, its courier) never touch the
// round's state; they post a message, and the message does, on the loop.
// A message may be posted before the attempt's loop exists (a round that
// ended while its workers were starting): the inbox keeps it, and the loop
// runs it as soon as it attaches. Messages posted after the loop detached
// are dropped with the inbox, which lives as long as its round.
#pragma once

#include <uv.h>

#include <deque>
#include <functional>
#include <mutex>

namespace elasticrun::agent {

class AttemptControl;

class Inbox {
 public:
  using Message = std::function<void(AttemptControl&)>;

  // Any thread.
  void post(Message message);

  // The attempt's loop registers its wakeup while it runs (messages already
  // posted wake it at once) and removes it before the loop goes away.
  void attach(uv_async_t* wakeup);
  void detach();
  // On the loop, from the wakeup: runs every message posted so far.
  void run_pending(AttemptControl& control);

 private:
  std::mutex mu_;
  std::deque<Message> queue_;
  uv_async_t* wakeup_ = nullptr;
};

}  // namespace elasticrun::agent
