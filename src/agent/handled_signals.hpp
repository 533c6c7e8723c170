// What a handled signal (--signals-to-handle) sent to the agent does to the
// attempt under way:
//
// - The first one, when the round's delegate says it means "this node
//   leaves" (the dynamic agent): the round ends and the workers stop at
//   the step the nodes agree on. The signal is forwarded after all if no
//   stop comes within --graceful-shutdown-timeout. When the workers are
//   stopping at an agreed step already (another node's leave: a
//   preemption's signals reach the nodes milliseconds apart), it is a
//   leave too: they go on to that step, and this node does not rejoin.
// - Otherwise it is forwarded to every worker and the run ends with it
//   (exit status 128 + signal); a stop already under way (a failure, a
//   round that ended) turns into this one.
// - While the workers stop after a forwarded signal (the grace period),
//   SIGINT kills them at once (a person at the terminal who will not
//   wait), and any other handled signal is forwarded too, changing
//   nothing else: SLURM warns with SIGUSR1 and then terminates with
//   SIGTERM, and the workers must see both to save before the end. The
//   run still ends with the first signal.
#pragma once

#include <uv.h>

#include <chrono>
#include <memory>
#include <vector>

namespace elasticrun::agent {

enum class SignalAction {
  kLeave,           // this node leaves the job (the delegate ends the round)
  kForwardAndStop,  // forward it, and stop the workers with it
  kForward,         // forward it only: the workers are stopping already
  kKill,            // SIGKILL every worker now
};

struct SignalState {
  bool first = true;               // no handled signal arrived before
  bool node_leaves = false;        // the delegate: it means "this node leaves"
  bool stopping = false;           // the workers were told to stop
  bool at_agreed_step = false;     // ... at the step the nodes agree on
  bool stopped_by_signal = false;  // ... by a forwarded signal (the grace)
};

SignalAction decide_signal(int signo, const SignalState& state);

// The attempt, as the signals act on it.
class SignalTarget {
 public:
  // Asked of the first signal only, forwarded or not: whether the node leaves.
  virtual bool node_leaves(int signo) = 0;
  virtual bool stopping() const = 0;
  // The workers were told to stop at an agreed step (not after a failure).
  virtual bool stopping_at_agreed_step() const = 0;
  virtual bool stopped_by_signal() const = 0;
  // Forwards signo to every worker and stops them; the run ends with it.
  virtual void stop_with(int signo) = 0;
  virtual void forward(int signo) = 0;
  virtual void kill_workers() = 0;

 protected:
  ~SignalTarget() = default;
};

// Watches the handled signals on an attempt's loop and carries out
// decide_signal() through the target. Its handles live on that loop, which
// closes them (uv_walk) before this object goes.
class HandledSignals {
 public:
  HandledSignals(std::vector<int> signals, std::chrono::milliseconds leave_grace,
                 SignalTarget& target)
      : signals_(std::move(signals)), leave_grace_(leave_grace), target_(target) {}
  HandledSignals(const HandledSignals&) = delete;
  HandledSignals& operator=(const HandledSignals&) = delete;

  // Starts watching on `loop`; once.
  void start(uv_loop_t* loop);
  // The attempt is over: a leave's fallback forward is not due any more.
  void cancel();
  // The signal the run ends with: the last that stopped the workers or
  // took the node away (a signal forwarded during the grace does not
  // replace it); 0 when none.
  int stop_signal() const { return stop_signal_; }

 private:
  void on_signal(int signo);

  const std::vector<int> signals_;
  const std::chrono::milliseconds leave_grace_;
  SignalTarget& target_;
  std::vector<std::unique_ptr<uv_signal_t>> handles_;
  uv_timer_t leave_timer_{};  // forwards the signal if nobody stops us
  bool started_ = false;
  int stop_signal_ = 0;
};

}  // namespace elasticrun::agent
