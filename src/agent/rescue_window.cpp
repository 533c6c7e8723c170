#include "agent/rescue_window.hpp"

#include <algorithm>

#include "util/logging.hpp"

namespace elasticrun::agent {

void RescueWindow::clear() {
  cancel();
  members_.clear();
  started_.reset();
}

void RescueWindow::open(std::chrono::milliseconds length, AttemptDelegate& delegate) {
  if (members_.empty()) return;
  delegate_ = &delegate;
  started_ = std::chrono::steady_clock::now();
  util::logger("agent")->info("{} worker(s) may save a rescue: {} in {} ms unless one is under way",
                              members_.size(), supervisor::signal_name(signal_), length.count());
  if (!timer_made_) {
    uv_timer_init(loop_, &timer_);
    timer_.data = this;
    timer_made_ = true;
  }
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<RescueWindow*>(t->data)->close_window(); },
      static_cast<uint64_t>(length.count()), 0);
}

void RescueWindow::close_window() {
  for (int lr : members_) {
    if (group_.exited(lr)) continue;
    if (delegate_->rescue(lr) == Rescue::kUnderWay) {
      util::logger("agent")->info("worker local rank {} is saving a rescue: left to finish", lr);
    } else {
      group_.signal_group(lr, signal_);
    }
  }
}

void RescueWindow::cancel() {
  if (timer_made_) uv_timer_stop(&timer_);
}

void RescueWindow::record_exit(const supervisor::WorkerExit& e, const control::ControlBlock* block,
                               events::EventLog& events, const AttemptPlace& at) const {
  if (!started_ || std::find(members_.begin(), members_.end(), e.local_rank) == members_.end()) {
    return;
  }
  const bool saved = block && e.local_rank < block->num_slots() &&
                     (block->read_slot(e.local_rank).flags & control::kFlagSaved) != 0;
  record_rescue(events, at, e, saved, std::chrono::steady_clock::now() - *started_);
}

}  // namespace elasticrun::agent
