#include "agent/inbox.hpp"

namespace elasticrun::agent {

void Inbox::post(Message message) {
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(message));
  if (wakeup_) uv_async_send(wakeup_);
}

void Inbox::attach(uv_async_t* wakeup) {
  std::lock_guard lock(mu_);
  wakeup_ = wakeup;
  if (!queue_.empty()) uv_async_send(wakeup_);
}

void Inbox::detach() {
  std::lock_guard lock(mu_);
  wakeup_ = nullptr;
}

void Inbox::run_pending(AttemptControl& control) {
  std::deque<Message> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(queue_);
  }
  // Outside the lock: a message may post another.
  for (auto& m : batch) m(control);
}

}  // namespace elasticrun::agent
