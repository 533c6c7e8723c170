// decide_signal(): what a handled signal to the agent does, at each point of
// an attempt (agent/handled_signals.hpp).
#include "agent/handled_signals.hpp"

#include <signal.h>

#include <catch2/catch.hpp>

using elasticrun::agent::decide_signal;
using elasticrun::agent::SignalAction;
using elasticrun::agent::SignalState;

TEST_CASE("the first signal is forwarded and stops the workers, unless it means the node leaves",
          "[signals]") {
  CHECK(decide_signal(SIGTERM, SignalState{}) == SignalAction::kForwardAndStop);
  CHECK(decide_signal(SIGINT, SignalState{}) == SignalAction::kForwardAndStop);
  SignalState leaves;
  leaves.node_leaves = true;
  CHECK(decide_signal(SIGTERM, leaves) == SignalAction::kLeave);
  // While the workers stop at an agreed step (another node left first: a
  // preemption reaches the nodes milliseconds apart), a leave too: they go
  // on to that step rather than get a second SIGTERM from the agent.
  leaves.stopping = true;
  leaves.at_agreed_step = true;
  CHECK(decide_signal(SIGTERM, leaves) == SignalAction::kLeave);
  // Not while they stop after a failure: the run ends with it.
  leaves.at_agreed_step = false;
  CHECK(decide_signal(SIGTERM, leaves) == SignalAction::kForwardAndStop);
}

TEST_CASE("during the grace after a forwarded signal, a later one reaches the workers too",
          "[signals]") {
  SignalState grace;
  grace.first = false;
  grace.stopping = true;
  grace.stopped_by_signal = true;
  // SLURM: SIGUSR1 first, SIGTERM at the end; and a repeated SIGTERM.
  CHECK(decide_signal(SIGTERM, grace) == SignalAction::kForward);
  CHECK(decide_signal(SIGUSR1, grace) == SignalAction::kForward);
  CHECK(decide_signal(SIGHUP, grace) == SignalAction::kForward);
  // A person at the terminal: Ctrl-C again kills at once.
  CHECK(decide_signal(SIGINT, grace) == SignalAction::kKill);
}

TEST_CASE("a signal while a leave waits for its stop, or after a failure, stops with it",
          "[signals]") {
  SignalState waiting;  // the node said it leaves; no stop has come yet
  waiting.first = false;
  CHECK(decide_signal(SIGTERM, waiting) == SignalAction::kForwardAndStop);
  SignalState failing;  // a worker failed: stopping, not by a signal
  failing.first = false;
  failing.stopping = true;
  CHECK(decide_signal(SIGINT, failing) == SignalAction::kForwardAndStop);
}
