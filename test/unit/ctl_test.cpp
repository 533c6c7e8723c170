// elasticctl's job commands (src/ctl) against a real store, reading rounds
// that real Rendezvous objects wrote: if the agents' keys change shape,
// these tests fail before an operator's `elasticctl status` does.
#include <catch2/catch.hpp>
#include <future>
#include <nlohmann/json.hpp>

#include "ctl/ctl_requests.hpp"
#include "ctl/job_connection.hpp"
#include "ctl/job_status.hpp"
#include "job_agents.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "server_fixture.hpp"

namespace elasticrun::ctl {
namespace {

using namespace std::chrono_literals;
using rendezvous::Assignment;
using rendezvous::EndKind;
using rendezvous::EndRecord;
using rendezvous::Rendezvous;
using test::ServerFixture;

constexpr const char* kRunId = "test";

JobAddress address(const ServerFixture& s) {
  return {"127.0.0.1", s.port(), kRunId, {}};
}

StoreClient connect(const ServerFixture& s) {
  return connect_job(address(s), 5s, 10s);
}

// The job's keys, as an agent sees them.
StoreClient raw(const ServerFixture& s) {
  StoreClientOptions o;
  o.key_prefix = rendezvous::keys::prefix(kRunId);
  return StoreClient::connect("127.0.0.1", s.port(), o);
}

struct Agents : test::JobAgents {
  Agents(const ServerFixture& s, int n, int min, int max) : JobAgents(s, kRunId, n, min, max) {}
};

}  // namespace

TEST_CASE("a store that no agent of the job reached has no such job", "[ctl]") {
  ServerFixture store;
  REQUIRE_THROWS_MATCHES(connect(store), NoSuchJob,
                         Catch::Message("no job 'test' on " + address(store).endpoint()));
}

TEST_CASE("an endpoint without a port gets torchrun's 29400, and port 0 is refused", "[ctl]") {
  const JobAddress a = parse_job_address("--rdzv-endpoint", "node1", "job");
  REQUIRE(a.host == "node1");
  REQUIRE(a.port == 29400);
  REQUIRE(parse_job_address("--rdzv-endpoint", "[::1]:1234", "job").endpoint() == "[::1]:1234");
  REQUIRE_THROWS_AS(parse_job_address("--rdzv-endpoint", "node1:0", "job"), ConfigError);
  REQUIRE_THROWS_AS(parse_job_address("--rdzv-endpoint", "node1:x", "job"), ConfigError);
}

TEST_CASE("status of a running round lists its members in group-rank order with their ranks",
          "[ctl]") {
  ServerFixture store;
  Agents agents(store, 3, 3, 3);
  const auto as = agents.join_all();
  StoreClient client = connect(store);

  JobStatus s = read_status(client, address(store));
  REQUIRE(s.state() == "running");
  REQUIRE(s.round == 1u);
  REQUIRE(s.open_round == 2u);
  REQUIRE(s.world_size == 6);
  REQUIRE(s.members.size() == 3);
  for (size_t i = 0; i < as.size(); ++i) {
    const MemberInfo& m = s.members[static_cast<size_t>(as[i].group_rank)];
    REQUIRE(m.group_rank == as[i].group_rank);
    REQUIRE(m.agent.node_id == "node" + std::to_string(i));
    REQUIRE(m.agent.host == "10.0.0." + std::to_string(i));
    REQUIRE(m.agent.local_world_size == 2);
    REQUIRE(m.rank_offset == as[i].rank_offset);
  }
  REQUIRE(!s.end);
  REQUIRE(s.waiting.empty());

  const auto j = nlohmann::json::parse(format_json(s));
  REQUIRE(j["state"] == "running");
  REQUIRE(j["nodes"] == 3);
  REQUIRE(j["members"][0]["group_rank"] == 0);
  const std::string table = format_table(s, std::chrono::system_clock::now());
  REQUIRE_THAT(table, Catch::Contains("round       1: 3 nodes, world size 6"));
  REQUIRE_THAT(table, Catch::Contains(s.members[2].agent.node_id));

  // The leader ends the round for a release: the status says why.
  EndRecord end;
  end.kind = EndKind::kScaleDown;
  end.target = 2;
  end.survivors = 2;
  end.release = 1;
  end.reason = "release of 1 node: 3 -> 2";
  agents.rdzv[0]->end_round(1, end);
  s = read_status(client, address(store));
  REQUIRE(s.state() == "ending");
  REQUIRE(s.end->kind == EndKind::kScaleDown);
  REQUIRE(s.end->release == 1);
  REQUIRE_THAT(format_table(s, std::chrono::system_clock::now()),
               Catch::Contains("ended       scale_down, next round 2 nodes: release of 1 node"));
}

TEST_CASE("status of a job whose first round forms shows the agents that joined", "[ctl]") {
  ServerFixture store;
  Agents agents(store, 1, 2, 2);
  auto joining = std::async(std::launch::async, [&] { return agents.rdzv[0]->join(); });
  raw(store).wait({"round"});  // the agent opens round 1 first
  StoreClient client = connect(store);
  JobStatus s;
  // The agent takes its index, then writes its record: wait for both.
  for (auto until = std::chrono::steady_clock::now() + test::kPatience;
       std::chrono::steady_clock::now() < until;) {
    s = read_status(client, address(store));
    if (!s.waiting.empty()) break;
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(s.state() == "forming");
  REQUIRE(!s.round);
  REQUIRE(s.joined == 1);
  REQUIRE(s.waiting.at(0).node_id == "node0");
  REQUIRE(nlohmann::json::parse(format_json(s))["round"].is_null());
  REQUIRE(nlohmann::json::parse(format_json(s))["allowed_hosts"].is_null());

  // With a host discovery script, the list in force; an agent on a host
  // it leaves out is marked.
  raw(store).set(rendezvous::keys::kAllowedHosts, "10.0.0.9:8\nnode7\n");
  s = read_status(client, address(store));
  REQUIRE(s.allowed_hosts);
  const std::string table = format_table(s, std::chrono::system_clock::now());
  REQUIRE_THAT(table, Catch::Contains("listed      2 hosts: 10.0.0.9:8, node7"));
  REQUIRE_THAT(table, Catch::Contains("unlisted  10.0.0.0"));
  const auto j = nlohmann::json::parse(format_json(s));
  REQUIRE(j["allowed_hosts"][0]["host"] == "10.0.0.9");
  REQUIRE(j["allowed_hosts"][0]["slots"] == 8);
  REQUIRE(j["allowed_hosts"][1]["slots"].is_null());
  agents.rdzv[0]->cancel();
  REQUIRE_THROWS_AS(joining.get(), rendezvous::RendezvousClosed);
}

TEST_CASE("a request is handled once ctl/handled reaches its number, and queues until then",
          "[ctl]") {
  ServerFixture store;
  StoreClient leader = raw(store);
  leader.compare_set("round", "", "1");
  StoreClient client = connect(store);

  const Ticket scale = submit(client, {Request::Kind::kScale, 3});
  REQUIRE(scale.seq == 1);
  REQUIRE(leader.get(rendezvous::keys::kScaleRequest) == "3");
  REQUIRE_THROWS_AS(wait_handled(client, scale, 100ms), TimeoutError);
  REQUIRE_THROWS_WITH(wait_handled(client, scale, 100ms), Catch::Contains("stays queued"));
  const Ticket release = submit(client, {Request::Kind::kRelease, 2});
  REQUIRE(release.seq == 2);
  REQUIRE(leader.add(rendezvous::keys::kReleaseRequest, 0) == 2);

  // The leader acts on both at once, as RoundWatch::lead does.
  leader.add("ctl/handled", 2);
  wait_handled(client, scale, 1s);
  wait_handled(client, release, 1s);
  const JobStatus s = read_status(client, address(store));
  REQUIRE(s.requests == 2);
  REQUIRE(s.handled == 2);
}

TEST_CASE("a request to a finished job is refused and writes nothing", "[ctl]") {
  ServerFixture store;
  StoreClient leader = raw(store);
  leader.compare_set("round", "", "1");
  leader.set("job/finished", "ok every worker succeeded");
  StoreClient client = connect(store);
  REQUIRE_THROWS_WITH(submit(client, {Request::Kind::kRelease, 1}),
                      Catch::Contains("finished: every worker succeeded"));
  REQUIRE(!leader.check({rendezvous::keys::kRequestSeq}));
  REQUIRE(!leader.check({rendezvous::keys::kReleaseRequest}));
}

TEST_CASE("the outcome of a request is the end record of the round it ended", "[ctl]") {
  ServerFixture store;
  Agents agents(store, 2, 2, 2);
  agents.join_all();
  StoreClient client = connect(store);
  const Request r{Request::Kind::kRelease, 1};
  const Ticket t = submit(client, r);
  REQUIRE(t.first_round == 1);

  EndRecord end;
  end.kind = EndKind::kScaleDown;
  end.target = 1;
  end.release = 1;
  end.reason = "release of 1 node: 2 -> 1";
  agents.rdzv[0]->client().add("ctl/handled", t.seq);
  agents.rdzv[0]->end_round(1, end);
  REQUIRE(outcome(client, r, t) ==
          "request #1 (release of 1 node) handled: round 1 ended (scale_down, next round 1 "
          "node): release of 1 node: 2 -> 1");
}

}  // namespace elasticrun::ctl
