// One round of the dynamic rendezvous on this node: its place (the
// assignment), how it ended (the end record, once known), the step every
// worker stops at after a voluntary event, and the progress samples of
// this node's workers. It is the attempt's delegate and the round watch's
// listener.
//
// Threads. Its state belongs to the attempt's loop, which runs on the
// agent's main thread; before and after the attempt the main thread reads
// it directly (no loop runs then). The round watch (a thread of its own)
// only posts the end record to the inbox. Store work the loop needs
// (ending the round after a local failure, announcing a leave, agreeing on
// the stop step) goes to the agent's courier, and what comes back comes
// back through the inbox. No blocking call runs on the loop.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "agent/attempt.hpp"
#include "agent/courier.hpp"
#include "agent/monitored_round.hpp"
#include "agent/progress.hpp"
#include "control/control_block.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "rendezvous/round_watch.hpp"

namespace elasticrun::agent {

class Round final : public MonitoredRound, public rendezvous::RoundListener {
 public:
  using Courier = agent::Courier<rendezvous::Rendezvous>;

  // Starts the round's watch (the caller resets the control block for the
  // round, unless parked workers hold its slots). Throws NetworkError when the watch cannot
  // connect. `beat`: the node's progress its heartbeat carries to the leader. `gpu`: the node's GPU
  // health, or null.
  Round(const AgentConfig& config, const rendezvous::RendezvousConfig& rc,
        const rendezvous::Assignment& place, control::ControlBlock* control, Courier& courier,
        rendezvous::BeatProgress& beat, GpuWatch* gpu = nullptr,
        serve::AgentMetrics* metrics = nullptr);
  ~Round() override;

  Inbox& inbox() { return *inbox_; }
  const rendezvous::Assignment& place() const { return place_; }
  // The record that ended the round, once the attempt heard it.
  const std::optional<rendezvous::EndRecord>& end() const { return end_; }

  // The attempt failed without a worker to blame (its pre-train script):
  // ends the round for everyone, as a worker's failure does.
  void fail(const std::string& what);

  // AttemptDelegate (the loop).
  void on_failure(const supervisor::WorkerExit& exit) override;
  void on_fault(const health::Fault& fault) override;
  bool on_signal(int signo) override;
  bool tell_stop(supervisor::WorkerGroup& workers) override;
  Rescue rescue(int local_rank) override;
  std::chrono::milliseconds rescue_window() override;
  void tick(std::chrono::steady_clock::time_point now) override;

  // RoundListener (the watch thread).
  void round_ended(const rendezvous::EndRecord& record) override;

 private:
  // On the loop: the watch's news, and the courier's answer.
  void ended(const rendezvous::EndRecord& record, AttemptControl& control);
  void stop_step_agreed(int64_t step);
  // Ends the round with `record` on the courier; when this node's record is
  // the one in force and `blame` says what of this node failed, the fault
  // counts towards excluding it (`exclude_now`: it excludes it at once).
  void end_round(rendezvous::EndRecord record, std::string log_line, std::string blame = {},
                 bool exclude_now = false);
  void publish_failure(const std::string& reason);
  rendezvous::EndRecord restart_record(std::string reason) const;

  const AgentConfig& config_;
  const rendezvous::RendezvousConfig& rc_;
  const rendezvous::Assignment place_;
  control::ControlBlock* control_;  // may be null (no tmpfs, no file)
  Courier& courier_;
  rendezvous::BeatProgress& beat_;
  std::optional<rendezvous::EndRecord> end_;
  int64_t agreed_stop_ = -1;  // -1 until every member agreed
  StepRate rate_;             // how fast this node's workers step
  // Shared with the courier's errands, which may answer after the round is
  // gone: their messages then wait in an inbox nobody attaches again.
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
  std::unique_ptr<rendezvous::RoundWatch> watch_;  // last: it posts into inbox_
};

// "the round ended (restart): <reason>", for logs and stop requests.
std::string describe(const rendezvous::EndRecord& record);

}  // namespace elasticrun::agent
