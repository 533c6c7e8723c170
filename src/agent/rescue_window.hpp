// After a failure, the workers that can save a rescue (they attached the
// SDK) get a window before --shutdown-signal: a survivor whose collective
// broke writes the state of the last step it completed. When the window
// closes, each one still running gets the signal unless its rescue is under
// way (the delegate says); its exit is recorded with whether it saved. On
// the attempt's loop only.
#pragma once

#include <uv.h>

#include <chrono>
#include <optional>
#include <vector>

#include "agent/attempt.hpp"
#include "agent/attempt_events.hpp"
#include "supervisor/worker_group.hpp"

namespace elasticrun::agent {

class RescueWindow {
 public:
  // `loop` may be initialised later: the timer is made at the first open,
  // and is the loop's handle then (the attempt's teardown closes it).
  RescueWindow(uv_loop_t* loop, supervisor::WorkerGroup& group, int shutdown_signal)
      : loop_(loop), group_(group), signal_(shutdown_signal) {}
  RescueWindow(const RescueWindow&) = delete;
  RescueWindow& operator=(const RescueWindow&) = delete;

  // A new failure: nobody in the window, none open.
  void clear();
  // Local rank `local_rank` waits for the window rather than get the signal now.
  void add(int local_rank) { members_.push_back(local_rank); }
  size_t size() const { return members_.size(); }
  // Opens the window for `length` (nothing when nobody was added).
  void open(std::chrono::milliseconds length, AttemptDelegate& delegate);
  // The attempt ended first.
  void cancel();
  // A worker exited: when it was in the window, its rescue event (saved:
  // the SDK's SAVED flag in the block, when there is one).
  void record_exit(const supervisor::WorkerExit& e, const control::ControlBlock* block,
                   events::EventLog& events, const AttemptPlace& at) const;

 private:
  void close_window();

  uv_loop_t* loop_;
  supervisor::WorkerGroup& group_;
  int signal_;
  AttemptDelegate* delegate_ = nullptr;  // the round's, while a window is open
  bool timer_made_ = false;
  uv_timer_t timer_{};
  std::vector<int> members_;
  std::optional<std::chrono::steady_clock::time_point> started_;
};

}  // namespace elasticrun::agent
