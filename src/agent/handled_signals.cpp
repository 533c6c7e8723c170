#include "agent/handled_signals.hpp"

#include <csignal>

#include "supervisor/worker_group.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {

SignalAction decide_signal(int signo, const SignalState& s) {
  if (s.first && s.node_leaves && (!s.stopping || s.at_agreed_step)) return SignalAction::kLeave;
  if (s.stopping && s.stopped_by_signal) {
    return signo == SIGINT ? SignalAction::kKill : SignalAction::kForward;
  }
  return SignalAction::kForwardAndStop;
}

void HandledSignals::start(uv_loop_t* loop) {
  if (started_) return;
  started_ = true;
  uv_timer_init(loop, &leave_timer_);
  leave_timer_.data = this;
  for (int signo : signals_) {
    auto h = std::make_unique<uv_signal_t>();
    uv_signal_init(loop, h.get());
    h->data = this;
    uv_signal_start(
        h.get(), [](uv_signal_t* s, int n) { static_cast<HandledSignals*>(s->data)->on_signal(n); },
        signo);
    handles_.push_back(std::move(h));
  }
}

void HandledSignals::cancel() {
  if (started_) uv_timer_stop(&leave_timer_);
}

void HandledSignals::on_signal(int signo) {
  auto log = util::logger("agent");
  SignalState state;
  state.first = stop_signal_ == 0;
  state.stopping = target_.stopping();
  state.stopped_by_signal = target_.stopped_by_signal();
  state.at_agreed_step = target_.stopping_at_agreed_step();
  state.node_leaves = state.first && target_.node_leaves(signo);
  const std::string name = supervisor::signal_name(signo);
  switch (decide_signal(signo, state)) {
    case SignalAction::kLeave:
      log->warn("received {}: this node leaves the job; its workers stop as the nodes agree", name);
      stop_signal_ = signo;
      uv_timer_start(
          &leave_timer_,
          [](uv_timer_t* t) {
            auto* self = static_cast<HandledSignals*>(t->data);
            if (self->target_.stopping()) return;
            util::logger("agent")->warn(
                "no stop request within {} ms of {}: forwarding it to the workers",
                self->leave_grace_.count(), supervisor::signal_name(self->stop_signal_));
            self->target_.stop_with(self->stop_signal_);
          },
          static_cast<uint64_t>(leave_grace_.count()), 0);
      return;
    case SignalAction::kKill:
      log->warn("second SIGINT: killing workers now");
      target_.kill_workers();
      return;
    case SignalAction::kForward:
      log->warn("received {} while the workers stop after {}: forwarding it to them", name,
                supervisor::signal_name(stop_signal_));
      target_.forward(signo);
      return;
    case SignalAction::kForwardAndStop:
      log->warn("received {}: forwarding it to the workers", name);
      stop_signal_ = signo;
      target_.stop_with(signo);
      return;
  }
}

}  // namespace elasticrun::agent
