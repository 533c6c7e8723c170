// Operator requests to a running job's leader: `elasticctl scale --nodes N`
// and `elasticctl release --nodes K`.
//
// A request is two store operations (docs/protocol.md, "Rendezvous"): the
// request itself (SET ctl/scale N, or ADD ctl/release K), then ADD ctl/seq
// 1, whose result numbers the request. The leader of the running round
// reads ctl/seq once per heartbeat interval, acts on every request it has
// not handled (the policy, docs/policy.md), and raises ctl/handled to the
// seq it saw. The order matters: a leader that sees the new seq must also
// see the request.
//
// Requests queue: one that no leader reads (no round running) is handled by
// the next leader. Releases add up; scale requests do not (the last one
// written wins).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "elasticrun/store_client.hpp"

namespace elasticrun::ctl {

struct Request {
  enum class Kind { kScale, kRelease };
  Kind kind = Kind::kScale;
  int nodes = 1;  // >= 1: the size asked for (scale) or the nodes given back (release)
};

// "scale to 3 nodes", "release of 1 node".
std::string describe(const Request& r);

// What submit() hands to wait_handled() and outcome().
struct Ticket {
  int64_t seq = 0;  // the request's number (ctl/seq after it)
  // The first round the request can end: the running round when it was
  // written, or the round after when that one had already ended.
  uint64_t first_round = 1;
};

// Writes the request. Throws ConfigError when nodes < 1, Error when the job
// has already finished, NetworkError or StoreError when the store fails.
Ticket submit(StoreClient& job, const Request& r);

// Waits until the leader has handled the request, polling ctl/handled.
// Throws TimeoutError when `timeout` passes first (the request stays queued:
// the message says so, since resubmitting a release would release twice),
// Error when the job finishes first.
void wait_handled(StoreClient& job, const Ticket& t, std::chrono::milliseconds timeout);

// After wait_handled: one line on what the leader made of the request: the
// end record of the first round that ended since it was written (the
// leader writes it right after ctl/handled), or, when the round goes on,
// its size and the policy's size limit. Only a report: nothing tells which
// round's leader handled the request, so a round ended at the same moment
// for another reason (a lost node) is reported instead.
std::string outcome(StoreClient& job, const Request& r, const Ticket& t);

}  // namespace elasticrun::ctl
