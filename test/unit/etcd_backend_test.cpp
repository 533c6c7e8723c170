// StoreClient on a real etcd (etcd/etcd_backend): the same answers as
// elasticrun's store, counters without retries, waits through watches,
// leases, and a member's loss.
#include "etcd/etcd_backend.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <future>
#include <set>
#include <thread>

#include "etcd_fixture.hpp"
#include "server_fixture.hpp"

namespace elasticrun {
namespace {

using namespace std::chrono_literals;
using test::EtcdFixture;
using test::ServerFixture;

// One script of operations; every answer, in order, as text.
std::vector<std::string> run_script(StoreClient& c) {
  std::vector<std::string> out;
  auto say = [&](const std::string& s) { out.push_back(s); };
  auto yes = [](bool b) { return std::string(b ? "true" : "false"); };
  c.set("a", "1");
  say(c.get("a"));
  say(c.get_present("missing"));
  say(yes(c.check({"a"})));
  say(yes(c.check({"a", "b"})));
  say(std::to_string(c.add("c", 1)));
  say(std::to_string(c.add("c", 2)));
  say(std::to_string(c.add("c", 0)));
  say(c.get("c"));
  say(std::to_string(c.add("never", 0)));
  say(std::to_string(c.add("c", -4)));
  say(std::to_string(c.add("c", 1)));
  c.set("decimal", "41");
  say(std::to_string(c.add("decimal", 1)));
  say(c.compare_set("d", "", "x"));
  say(c.compare_set("d", "y", "z"));
  say(c.compare_set("absent", "q", "w"));
  say(yes(c.check({"absent"})));
  say(c.compare_set("d", "x", "z"));
  c.set("empty", "");
  say(c.compare_set("empty", "", "filled"));
  c.append("f", "ab");
  c.append("f", "cd");
  say(c.get("f"));
  c.multi_set({"g", "h", "g"}, {"1", "2", "3"});
  for (const auto& v : c.multi_get({"g", "h"})) say(v);
  for (const auto& v : c.multi_get_present({"h", "missing"})) say(v);
  say(yes(c.delete_key("g")));
  say(yes(c.delete_key("g")));
  say(yes(c.check({"g"})));
  auto keys = c.list_keys();
  std::sort(keys.begin(), keys.end());
  for (const auto& k : keys) say("key " + k);
  say(std::to_string(c.num_keys()));
  return out;
}

}  // namespace

TEST_CASE("on etcd every store operation answers as on elasticrun's store", "[etcd]") {
  // The store's thread stops (joined) before etcd's directory goes: the
  // directory's removal may reuse a descriptor number that thread used.
  EtcdFixture etcd;
  ServerFixture ours;
  auto a = ours.client("/t/");
  auto b = etcd.client("/t/");
  const auto want = run_script(a);
  const auto got = run_script(b);
  REQUIRE(got == want);
}

TEST_CASE("agents adding to one counter on etcd at once each get a different count", "[etcd]") {
  EtcdFixture etcd;
  constexpr int kThreads = 8, kAdds = 25;
  std::vector<std::future<std::vector<int64_t>>> fs;
  for (int t = 0; t < kThreads; ++t) {
    fs.push_back(std::async(std::launch::async, [&] {
      auto c = etcd.client("/j/");
      std::vector<int64_t> got;
      for (int i = 0; i < kAdds; ++i) got.push_back(c.add("arrivals", 1));
      return got;
    }));
  }
  std::set<int64_t> all;
  for (auto& f : fs) {
    for (int64_t v : f.get()) REQUIRE(all.insert(v).second);
  }
  REQUIRE(all.size() == size_t{kThreads * kAdds});
  REQUIRE(*all.begin() == 1);
  REQUIRE(*all.rbegin() == kThreads * kAdds);
  auto c = etcd.client("/j/");
  REQUIRE(c.get("arrivals") == std::to_string(kThreads * kAdds));
}

TEST_CASE("a wait on etcd ends when another client writes the key and times out naming it",
          "[etcd]") {
  EtcdFixture etcd;
  auto waiter = etcd.client("/w/");
  auto writer = etcd.client("/w/");
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(200ms);
    writer.set("late", "here");
  });
  REQUIRE(waiter.get("late", 20s) == "here");
  later.get();
  try {
    waiter.wait({"late", "never"}, 300ms);
    FAIL("the wait returned");
  } catch (const TimeoutError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("never"));
  }
  // The client is still usable after a timed-out wait.
  REQUIRE(waiter.get("late") == "here");
}

TEST_CASE("multi_get and multi_set on etcd carry more keys than one transaction holds", "[etcd]") {
  EtcdFixture etcd;
  auto c = etcd.client("/m/");
  std::vector<std::string> keys, values;
  for (int i = 0; i < 300; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back(std::string(static_cast<size_t>(i % 7) * 100, 'v') + std::to_string(i));
  }
  c.multi_set(keys, values);
  REQUIRE(c.multi_get(keys) == values);
  REQUIRE(c.check(keys));
  REQUIRE(c.num_keys() == 300);
}

TEST_CASE("keys a client writes with a TTL are removed by etcd once it stops writing", "[etcd]") {
  EtcdFixture etcd;
  StoreClientOptions o;
  o.key_prefix = "/l/";
  o.key_ttl = 2s;
  o.timeout = 10s;
  {
    auto beating = etcd::connect(etcd.options(), o);
    for (int i = 0; i < 4; ++i) {
      beating.set("hb", std::to_string(i));
      std::this_thread::sleep_for(1s);
    }
    // Renewed by the writes: alive past its first TTL.
    auto reader = etcd.client("/l/");
    REQUIRE(reader.get_present("hb") == "3");
  }
  auto reader = etcd.client("/l/");
  REQUIRE(test::eventually([&] { return !reader.check({"hb"}); }));
}

TEST_CASE("a client of a three-member etcd goes on when the member it uses is killed", "[etcd]") {
  EtcdFixture etcd(3);
  auto c = etcd.client("/f/", 20s);
  auto writer = etcd.client("/f/", 20s);
  c.set("before", "1");
  REQUIRE(c.endpoint() == "127.0.0.1:" + std::to_string(etcd.client_port(0)));
  // A wait in progress on the member that dies.
  auto waiting = std::async(std::launch::async, [&] { return c.get("after", 20s); });
  std::this_thread::sleep_for(300ms);
  etcd.kill(0);
  // The writer used member 0 too: its next write moves to another member.
  writer.set("after", "2");
  REQUIRE(waiting.get() == "2");
  REQUIRE(c.add("count", 1) == 1);
  REQUIRE(c.get("before") == "1");
  REQUIRE(c.endpoint() != "127.0.0.1:" + std::to_string(etcd.client_port(0)));
}

TEST_CASE(
    "over https a client that trusts the members' CA is served and one that does not is refused",
    "[etcd]") {
  EtcdFixture etcd(1, true);
  auto c = etcd.client("/s/");
  c.set("k", "over tls");
  REQUIRE(c.get("k") == "over tls");
  REQUIRE(c.add("n", 1) == 1);
  etcd::EtcdOptions untrusting = etcd.options();
  untrusting.ca_file.clear();
  StoreClientOptions o;
  o.connect_timeout = 5s;
  REQUIRE_THROWS_AS(etcd::connect(untrusting, o), ConfigError);
  etcd::EtcdOptions plain = etcd.options();
  plain.tls = false;
  REQUIRE_THROWS_AS(etcd::connect(plain, o), Error);
}

TEST_CASE("an etcd that nobody serves fails the connect within its timeout, naming each member",
          "[etcd]") {
  etcd::EtcdOptions e;
  const uint16_t p1 = test::unused_port(), p2 = test::unused_port();
  e.endpoints = {{"127.0.0.1", p1}, {"127.0.0.1", p2}};
  StoreClientOptions o;
  o.connect_timeout = 1s;
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)etcd::connect(e, o);
    FAIL("connected to nothing");
  } catch (const NetworkError& err) {
    REQUIRE_THAT(err.what(),
                 Catch::Contains(std::to_string(p1)) && Catch::Contains(std::to_string(p2)));
  }
  REQUIRE(std::chrono::steady_clock::now() - start < 10s);
}

}  // namespace elasticrun
