// Applies one decoded request to the store's State and encodes the reply.
//
// One handler function per query type; the server calls handle() for each
// complete request, sends `reply` to the requesting client and STOP_WAITING
// to every client in `woken`.
#pragma once

#include <string>

#include "store/frame.hpp"
#include "store/state.hpp"

namespace elasticrun::store {

struct HandleResult {
  bool ok = true;
  std::string error;  // why the connection must be closed, when !ok
};

class Handler {
 public:
  explicit Handler(const Limits& limits) : limits_(limits) {}

  HandleResult handle(ClientId client, Request& req, std::string& reply, Wakeups& woken);
  // The client's connection is gone: forget its wait.
  void disconnect(ClientId client) { state_.cancel_wait(client); }

  const State& state() const { return state_; }
  // The standby's part (store/replica.hpp): the data's changes, recorded
  // into `journal` while set; the data as changes.
  void set_journal(std::vector<Change>* journal) { state_.set_journal(journal); }
  std::vector<Change> snapshot() const { return state_.snapshot(); }
  // A standby's: applies one change of its primary.
  void apply(const Change& change) { state_.apply(change); }

 private:
  Limits limits_;
  State state_;
};

}  // namespace elasticrun::store
