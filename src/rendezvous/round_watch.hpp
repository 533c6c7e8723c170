// Watches one running round from a thread of its own: waits for the round's
// end record, and meanwhile does the duties of this agent's place in it.
//
// - The leader (group rank 0) observes, every heartbeat interval, every
//   member's heartbeat, the agents waiting for the next round, the members
//   that announced they are leaving, and operator requests (elasticctl
//   scale / release); it feeds them to the elastic policy and, when the
//   policy decides, ends the round with the decision. The members'
//   heartbeats also carry their compute times: a straggler (health/
//   straggler.hpp) is excluded and the round ends without it. With a host
//   discovery script, a member whose host is no longer listed ends the
//   round the same way, gracefully (scale down at an agreed step).
// - A follower watches the leader's heartbeat and ends the round (replace)
//   when it stops: a new leader comes out of the next round.
//
// Whoever ends the round, every watch sees the end record within one store
// round trip (it is blocked in WAIT on the key) and reports it once.
#pragma once

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "elastic/policy.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::rendezvous {

// Who hears that the round ended.
class RoundListener {
 public:
  // Once, on the watch thread, with the record that ended the round (or,
  // when the store was lost, a restart record saying so). It must only
  // hand the record on (post it to its owner's loop), not block.
  virtual void round_ended(const EndRecord& record) = 0;

 protected:
  ~RoundListener() = default;
};

struct WatchOptions {
  Assignment assignment;
  elastic::PolicyConfig policy;
};

class RoundWatch {
 public:
  // Connects its own store client and starts the thread; `listener` must
  // outlive the watch. Throws NetworkError.
  RoundWatch(const RendezvousConfig& config, WatchOptions options, RoundListener& listener);
  // Stops the thread; returns within one heartbeat interval.
  ~RoundWatch();
  RoundWatch(const RoundWatch&) = delete;
  RoundWatch& operator=(const RoundWatch&) = delete;

 private:
  void run();
  void lead(const std::vector<Member>& members, elastic::Policy& policy);
  bool end_for_straggler(const std::vector<health::NodeSample>& samples, int current);
  bool end_for_unlisted(const std::vector<Member>& members);
  void follow();

  WatchOptions options_;
  RoundListener& listener_;
  std::unique_ptr<Rendezvous> rdzv_;     // the thread's own connection
  health::StragglerDetector straggler_;  // the leader's, over this round
  bool straggler_kept_ = false;          // warned that a straggler stays
  // What the leader last recorded in the event log, so that each change is
  // recorded once rather than every heartbeat interval.
  std::set<std::string> reported_lost_;
  int seen_waiting_ = 0, seen_leaving_ = 0, seen_excluded_ = 0;
  int64_t seen_request_seq_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace elasticrun::rendezvous
