// How the nodes of a static job agree on a restart (agent/static_restart):
// node 0 publishes the restart policy's decision, the others follow it, and
// a node that loses node 0's store before reading one fails the job with a
// reason instead of an error.
#include "agent/static_restart.hpp"

#include <catch2/catch.hpp>
#include <memory>

#include "agent/embedded_store.hpp"

using namespace elasticrun::agent;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::health::RestartAction;

namespace {

AgentConfig node_config(int node_rank) {
  AgentConfig c;
  c.run_id = "static-restart-test";
  c.master_addr = "127.0.0.1";
  c.nnodes = 2;
  c.node_rank = node_rank;
  c.join_timeout = 2s;
  return c;
}

}  // namespace

TEST_CASE("the other nodes follow node 0's restart decision", "[agent]") {
  EmbeddedStore store("127.0.0.1", 0);
  const AgentConfig c0 = node_config(0), c1 = node_config(1);
  StaticRestarts node0(c0, store.port()), node1(c1, store.port());
  node0.publish_decision(0, {RestartAction::kFullJob, "the third failure in 60 s"});
  node0.publish_decision(1, {RestartAction::kFail, "no restart is left"});
  const auto first = node1.decision(0), second = node1.decision(1);
  CHECK(first.action == RestartAction::kFullJob);
  CHECK(first.reason == "the third failure in 60 s");
  CHECK(second.action == RestartAction::kFail);
  CHECK(second.reason == "no restart is left");
}

TEST_CASE("a node that loses node 0's store before its decision fails the job", "[agent]") {
  auto store = std::make_unique<EmbeddedStore>("127.0.0.1", 0);
  const AgentConfig c1 = node_config(1);
  StaticRestarts node1(c1, store->port());
  store.reset();  // node 0 decided, published and exited, or died
  const auto d = node1.decision(0);
  CHECK(d.action == RestartAction::kFail);
  CHECK_THAT(d.reason, Contains("lost node rank 0's store before its decision about restart 1"));
}

TEST_CASE("a node waits for node 0's decision up to the join timeout", "[agent]") {
  EmbeddedStore store("127.0.0.1", 0);
  AgentConfig c1 = node_config(1);
  c1.join_timeout = 300ms;
  StaticRestarts node1(c1, store.port());
  const auto d = node1.decision(2);
  CHECK(d.action == RestartAction::kFail);
  CHECK_THAT(d.reason, Contains("decided nothing about restart 3 within the join timeout"));
}
