// --host-discovery-script: the list's format (rendezvous/host_list), the
// script runner (agent/host_discovery), and the closer admitting only listed
// hosts against a real store. The whole job, agents joining and leaving as
// the script's output changes, is test/integration/test_host_discovery.py.
#include "agent/host_discovery.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>

#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "server_fixture.hpp"

namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;
using elasticrun::rendezvous::HostList;
using elasticrun::rendezvous::ListedHost;

TEST_CASE("a host list is host[:slots] lines; a bad line refuses the whole list", "[hosts]") {
  const HostList l = HostList::parse(
      "# from the autoscaling group\n"
      "node1:8\n"
      "  node2  \n"
      "\n"
      "10.0.0.7:4\r\n"
      "[fe80::1]:2\n"
      "node1:2\n");  // listed twice: the first slots stay
  REQUIRE(l.hosts.size() == 4);
  CHECK(l.hosts[0] == ListedHost{"node1", 8});
  CHECK(l.hosts[1] == ListedHost{"node2", std::nullopt});
  CHECK(l.hosts[2] == ListedHost{"10.0.0.7", 4});
  CHECK(l.hosts[3] == ListedHost{"fe80::1", 2});
  CHECK(HostList::parse(l.serialize()) == l);
  CHECK(HostList::parse("").hosts.empty());

  CHECK_THROWS_WITH(HostList::parse("node1\nnode 2\n"), Contains("line 2") && Contains("space"));
  CHECK_THROWS_WITH(HostList::parse("node1:0\n"), Contains("positive"));
  CHECK_THROWS_WITH(HostList::parse("node1:x\n"), Contains("positive"));
  CHECK_THROWS_WITH(HostList::parse("node1:\n"), Contains("no slots"));
  CHECK_THROWS_WITH(HostList::parse(":4\n"), Contains("no host"));
  CHECK_THROWS_WITH(HostList::parse("fe80::1\n"), Contains("[address]"));
  CHECK_THROWS_AS(HostList::parse("[fe80::1\n"), ConfigError);
}

TEST_CASE("a listed host admits agents whose workers fit its slots; names match by first label",
          "[hosts]") {
  const HostList l = HostList::parse("node1:4\nnode2.cluster.local\n10.0.0.7\n");
  CHECK(l.admits("node1", 4));
  CHECK_FALSE(l.admits("node1", 8));  // --nproc-per-node 8 on a 4-slot host
  CHECK(l.admits("node1.cluster.local", 2));
  CHECK(l.admits("node2", 64));  // no slots: any
  CHECK(l.admits("node2.cluster.local", 1));
  CHECK_FALSE(l.admits("node2.other.local", 1));
  CHECK_FALSE(l.admits("node3", 1));
  CHECK(l.admits("10.0.0.7", 1));
  CHECK_FALSE(l.admits("10", 1));  // addresses match only exactly
  CHECK_FALSE(l.admits("10.0.0.70", 1));
}

struct Script {
  std::filesystem::path path;
  explicit Script(const std::string& body) {
    path = std::filesystem::temp_directory_path() /
           ("elasticrun-discover-" + std::to_string(::getpid()) + "-" +
            std::to_string(reinterpret_cast<uintptr_t>(this)) + ".sh");
    std::ofstream(path) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ~Script() { std::filesystem::remove(path); }
};

TEST_CASE("the script's output is the list; a failing, hung or garbled script is an error",
          "[hosts]") {
  using elasticrun::agent::run_discovery_script;
  Script good("echo node1:2; echo node2\n");
  CHECK(run_discovery_script(good.path.string(), 5s).hosts.size() == 2);
  Script failing("echo node1; exit 3\n");
  CHECK_THROWS_WITH(run_discovery_script(failing.path.string(), 5s), Contains("exit status 3"));
  Script garbled("echo 'node1 node2'\n");
  CHECK_THROWS_WITH(run_discovery_script(garbled.path.string(), 5s), Contains("space"));
  CHECK_THROWS_WITH(run_discovery_script("/nonexistent/discover.sh", 5s), Contains("127"));
  Script hung("echo node1; exec sleep 30\n");
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(run_discovery_script(hung.path.string(), 300ms), elasticrun::TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("discovery answers from its last good run and keeps it through a failure", "[hosts]") {
  const auto file = std::filesystem::temp_directory_path() /
                    ("elasticrun-hosts-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "node1\n";
  Script script("cat '" + file.string() + "'\n");
  elasticrun::agent::HostDiscovery d({script.path.string(), 50ms, 5s});
  CHECK(d.current() == HostList::parse("node1\n"));  // the first call waits for the first run
  std::ofstream(file) << "node1\nnode2\n";
  auto until = [&](const HostList& want) {
    for (int i = 0; i < 200 && !(d.current() == want); ++i) std::this_thread::sleep_for(20ms);
    return d.current() == want;
  };
  CHECK(until(HostList::parse("node1\nnode2\n")));
  std::ofstream(file) << "node 1\n";  // garbled: the list before stays in force
  std::this_thread::sleep_for(300ms);
  CHECK(d.current() == HostList::parse("node1\nnode2\n"));
  std::ofstream(file) << "node2\n";
  CHECK(until(HostList::parse("node2\n")));
  std::filesystem::remove(file);
}

TEST_CASE("the discovery flags need an elastic job", "[hosts]") {
  const auto c = elasticrun::cli::parse_launch_args(
      {"--host-discovery-script", "/opt/d.sh", "--host-discovery-interval", "2", "t.py"}, {}, 4, 0);
  CHECK(c.host_discovery_script == "/opt/d.sh");
  CHECK(c.host_discovery_interval == 2);
  CHECK_THROWS_WITH(
      elasticrun::cli::parse_launch_args({"--host-discovery-interval", "0.01", "t.py"}, {}, 4, 0),
      Contains("below 0.05 s"));
}

// A source the test sets by hand.
class FakeHosts final : public elasticrun::rendezvous::HostSource {
 public:
  FakeHosts() = default;  // no answer yet
  explicit FakeHosts(const std::string& text) : list_(HostList::parse(text)) {}
  void set(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    list_ = HostList::parse(text);
  }
  std::optional<HostList> current() override {
    std::lock_guard<std::mutex> lock(mu_);
    return list_;
  }
  std::chrono::milliseconds interval() const override { return 50ms; }

 private:
  std::mutex mu_;
  std::optional<HostList> list_;
};

}  // namespace

namespace elasticrun::rendezvous {

TEST_CASE("the closer admits only listed hosts and waits for enough of them", "[hosts]") {
  test::ServerFixture store;
  FakeHosts hosts("h0\n");
  std::vector<std::unique_ptr<Rendezvous>> agents;
  std::vector<std::unique_ptr<Heartbeat>> beats;
  for (int i = 0; i < 3; ++i) {
    RendezvousConfig c;
    c.store_host = "127.0.0.1";
    c.store_port = store.port();
    c.run_id = "hosts";
    c.node_id = "n" + std::to_string(i);
    c.host = "h" + std::to_string(i);
    c.sizes.min_replicas = 2;
    c.sizes.max_replicas = 3;
    c.join_timeout = 20s;
    c.last_call_timeout = 200ms;
    c.heartbeat_interval = 50ms;
    c.missed_heartbeats = 4;
    c.store_timeout = 10s;
    c.hosts = &hosts;
    agents.push_back(std::make_unique<Rendezvous>(c));
    beats.push_back(std::make_unique<Heartbeat>(c));
  }
  std::vector<std::future<Assignment>> joins;
  for (auto& a : agents) {
    joins.push_back(std::async(std::launch::async, [&a] { return a->join(); }));
  }
  // Three joined, one of them listed: below the minimum of two, so the
  // round stays open until the list grows.
  REQUIRE(joins[1].wait_for(500ms) == std::future_status::timeout);
  hosts.set("h0\nh1\n");
  const Assignment a0 = joins[0].get(), a1 = joins[1].get();
  CHECK(a0.group_world_size == 2);
  CHECK(a0.world_size == 2);
  CHECK(a0.group_rank + a1.group_rank == 1);
  // h2 waits as a spare, and does not count as capacity to grow onto...
  REQUIRE(joins[2].wait_for(200ms) == std::future_status::timeout);
  CHECK(agents[0]->live_waiting_after(1) == 0);
  CHECK(parse_member_list(agents[0]->client().get(keys::members(1, 1))).size() == 2);
  CHECK(HostList::parse(agents[0]->client().get(keys::kAllowedHosts)) == hosts.current());
  // ...until it is listed.
  hosts.set("h0\nh1\nh2\n");
  CHECK(agents[0]->live_waiting_after(1) == 1);
  agents[2]->cancel();
  CHECK_THROWS_AS(joins[2].get(), RendezvousClosed);

  // An agent whose own script has not answered yet (a leader that just
  // took over) goes by the list published in the store; it admits no one
  // when there is none.
  FakeHosts silent;
  RendezvousConfig c = agents[0]->config();
  c.node_id = "late";
  c.hosts = &silent;
  Rendezvous late(c);
  CHECK(late.allowed_hosts() == hosts.current());
  late.client().set("hosts/allowed", "");
  CHECK(late.allowed_hosts() == HostList{});
  late.client().delete_key("hosts/allowed");
  CHECK_FALSE(late.allowed_hosts());
  JoinRecord r;
  r.host = "h0";
  r.local_world_size = 1;
  CHECK_FALSE(late.host_admitted(late.allowed_hosts(), r));
  CHECK(agents[0]->host_admitted(agents[0]->allowed_hosts(), r));
}

}  // namespace elasticrun::rendezvous
