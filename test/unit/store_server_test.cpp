// The store server driven through StoreClient: every operation, the waits
// that block and the ones that time out, and stopping the server.
// store_server_wire_test.cpp covers what only a raw socket can send.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server_fixture.hpp"

using elasticrun::NetworkError;
using elasticrun::StoreClient;
using elasticrun::TimeoutError;
using elasticrun::test::kPatience;
using elasticrun::test::RawConnection;
using elasticrun::test::ServerFixture;
using std::chrono::milliseconds;

namespace {

// Runs fn on a thread and keeps what it threw, since Catch's assertions
// belong to the main thread.
class Background {
 public:
  template <typename Fn>
  explicit Background(Fn fn)
      : thread_([this, fn = std::move(fn)]() mutable {
          try {
            fn();
          } catch (const std::exception& e) {
            error_ = e.what();
          }
        }) {}
  ~Background() { join(); }
  // Joins; returns what the thread threw, or "" if it returned normally.
  std::string join() {
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  std::string error_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("a value set by one client is what another client gets", "[server]") {
  ServerFixture fx;
  StoreClient a = fx.client();
  StoreClient b = fx.client();
  a.set("k", "v1");
  CHECK(b.get("k") == "v1");
  b.set("k", std::string("\0bin\xff", 5));
  CHECK(a.get("k") == std::string("\0bin\xff", 5));
  a.set("empty", "");
  CHECK(b.get("empty").empty());
  CHECK(b.check({"empty"}));
}

TEST_CASE("add keeps a decimal counter that starts at zero", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK(c.add("n", 5) == 5);
  CHECK(c.add("n", -7) == -2);
  CHECK(c.get("n") == "-2");
  c.set("m", "40");
  CHECK(c.add("m", 2) == 42);
}

TEST_CASE("compare_set swaps only on a match and reports the value after", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  // Absent key, empty expected: created.
  CHECK(c.compare_set("k", "", "first") == "first");
  CHECK(c.get("k") == "first");
  // Mismatch: unchanged, current value returned.
  CHECK(c.compare_set("k", "wrong", "second") == "first");
  CHECK(c.get("k") == "first");
  // Match: replaced.
  CHECK(c.compare_set("k", "first", "second") == "second");
  CHECK(c.get("k") == "second");
  // Absent key, non-empty expected: TCPStore answers with expected and stores nothing.
  CHECK(c.compare_set("absent", "guess", "x") == "guess");
  CHECK_FALSE(c.check({"absent"}));
}

TEST_CASE("check is true only when every key exists", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK(c.check({}));
  CHECK_FALSE(c.check({"a"}));
  c.set("a", "1");
  CHECK(c.check({"a"}));
  CHECK_FALSE(c.check({"a", "b"}));
  c.set("b", "2");
  CHECK(c.check({"a", "b"}));
}

TEST_CASE("num_keys, delete_key and append act on the whole store", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK(c.num_keys() == 0);
  c.set("a", "1");
  c.set("b", "2");
  CHECK(c.num_keys() == 2);
  CHECK(c.delete_key("a"));
  CHECK_FALSE(c.delete_key("a"));
  CHECK(c.num_keys() == 1);
  CHECK_FALSE(c.check({"a"}));
  c.append("log", "one,");
  c.append("log", "two");
  CHECK(c.get("log") == "one,two");
  CHECK(c.num_keys() == 2);
}

TEST_CASE("multi_set and multi_get keep keys and values in order", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  c.multi_set({"x", "y", "z"}, {"1", "", "3"});
  CHECK(c.multi_get({"z", "x", "y"}) == std::vector<std::string>{"3", "1", ""});
  CHECK(c.multi_get({}).empty());
}

TEST_CASE("queues pop in push order and count their elements", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK(c.queue_len("q") == 0);
  c.queue_push("q", "a");
  c.queue_push("q", "b");
  c.queue_push("q", "c");
  CHECK(c.queue_len("q") == 3);
  CHECK(c.queue_pop("q") == "a");
  CHECK(c.queue_pop("q") == "b");
  CHECK(c.queue_len("q") == 1);
  // Queues are not keys.
  CHECK(c.num_keys() == 0);
  CHECK(c.queue_pop("q") == "c");
  CHECK(c.queue_len("q") == 0);
}

TEST_CASE("list_keys returns the keys under the client's prefix", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  c.set("a", "1");
  c.set("b", "2");
  c.queue_push("q", "not a key");
  auto keys = c.list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"a", "b"});
}

TEST_CASE("keys carry a '/' prefix on the wire, as torch.distributed.TCPStore's do", "[server]") {
  ServerFixture fx;
  StoreClient torch_like = fx.client();
  StoreClient raw_keys = fx.client("");
  torch_like.set("k", "v");
  CHECK(raw_keys.get("/k") == "v");
  CHECK_FALSE(raw_keys.check({"k"}));
  raw_keys.set("bare", "1");
  auto wire = raw_keys.list_keys();
  std::sort(wire.begin(), wire.end());
  CHECK(wire == std::vector<std::string>{"/k", "bare"});
  // The prefixed client sees only its own namespace.
  CHECK(torch_like.list_keys() == std::vector<std::string>{"k"});
}

TEST_CASE("ping answers", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK(c.ping() >= milliseconds(0));
  CHECK(c.ping() >= milliseconds(0));
}

TEST_CASE("wait returns at once for keys that exist", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  c.set("a", "1");
  c.set("b", "2");
  CHECK_NOTHROW(c.wait({"a", "b"}));
}

TEST_CASE("a wait is released by a set from another client", "[server]") {
  ServerFixture fx;
  StoreClient waiter = fx.client();
  StoreClient setter = fx.client();
  const uint64_t before = fx.stats().requests;
  std::atomic<bool> returned{false};
  Background t([&] {
    waiter.wait({"late"});
    returned = true;
  });
  // Set only once the WAIT is handled, so the blocking path is what runs.
  REQUIRE(fx.requests_reach(before + 1));
  CHECK_FALSE(returned.load());
  setter.set("late", "here");
  CHECK(t.join().empty());
  CHECK(waiter.get("late") == "here");
}

TEST_CASE("get blocks until the key is set by another client", "[server]") {
  ServerFixture fx;
  StoreClient getter = fx.client();
  StoreClient setter = fx.client();
  const uint64_t before = fx.stats().requests;
  std::string got;
  Background t([&] { got = getter.get("late"); });
  REQUIRE(fx.requests_reach(before + 1));
  setter.set("late", "value");
  CHECK(t.join().empty());
  CHECK(got == "value");
}

TEST_CASE("get_present reads a set key with one request, without waiting", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  c.set("k", "v");
  REQUIRE(c.check({"k"}));  // answered: the SET before it was handled too
  const uint64_t before = fx.stats().requests;
  CHECK(c.get_present("k") == "v");
  CHECK(fx.stats().requests == before + 1);
  CHECK(c.get("k") == "v");
  CHECK(fx.stats().requests == before + 3);  // get() sends WAIT, then GET
  // No wait: a key that is not set reads as empty from our server at once.
  CHECK(c.get_present("absent", std::chrono::milliseconds(500)).empty());
}

TEST_CASE("a blocking queue_pop is released by a push from another client", "[server]") {
  ServerFixture fx;
  StoreClient consumer = fx.client();
  StoreClient producer = fx.client();
  const uint64_t before = fx.stats().requests;
  std::string got;
  Background t([&] { got = consumer.queue_pop("jobs"); });
  REQUIRE(fx.requests_reach(before + 1));
  producer.queue_push("jobs", "job-1");
  CHECK(t.join().empty());
  CHECK(got == "job-1");
  CHECK(producer.queue_len("jobs") == 0);
}

TEST_CASE("a barrier of world size 3 releases all three clients only when the third arrives",
          "[server]") {
  ServerFixture fx;
  std::vector<StoreClient> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(fx.client());
  std::atomic<int> passed{0};
  const uint64_t before = fx.stats().requests;
  std::vector<std::unique_ptr<Background>> threads;
  for (int i = 0; i < 2; ++i) {
    threads.push_back(std::make_unique<Background>([&, i] {
      clients[static_cast<size_t>(i)].barrier("round-1", 3);
      passed.fetch_add(1);
    }));
  }
  REQUIRE(fx.requests_reach(before + 2));
  // Both BARRIER requests are handled; the server must not have released them.
  CHECK(passed.load() == 0);
  threads.push_back(std::make_unique<Background>([&] {
    clients[2].barrier("round-1", 3);
    passed.fetch_add(1);
  }));
  for (auto& t : threads) CHECK(t->join().empty());
  CHECK(passed.load() == 3);
  // The arrival count lives under the key, as in PyTorch.
  CHECK(clients[0].get("round-1") == "3");
}

TEST_CASE("a wait that times out names the endpoint and key, and the client carries on",
          "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  const std::string endpoint = "127.0.0.1:" + std::to_string(fx.port());
  CHECK(c.endpoint() == endpoint);
  try {
    c.wait({"never-set"}, milliseconds(50));
    FAIL("wait on a key nobody sets returned");
  } catch (const TimeoutError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains(endpoint));
    CHECK_THAT(msg, Catch::Contains("never-set"));
  }
  // The wait was cancelled on the server: the connection is in sync.
  c.set("next", "ok");
  CHECK(c.get("next") == "ok");
  CHECK(c.add("counter", 1) == 1);
  // A set of the abandoned key must not leave a stray STOP_WAITING behind.
  StoreClient other = fx.client();
  other.set("never-set", "now");
  CHECK(other.get("never-set") == "now");
  CHECK(c.add("counter", 1) == 2);
  CHECK(c.get("never-set") == "now");
}

TEST_CASE("a get of a missing key times out the same way", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  const std::string endpoint = "127.0.0.1:" + std::to_string(fx.port());
  try {
    (void)c.get("missing", milliseconds(50));
    FAIL("get of a missing key returned");
  } catch (const TimeoutError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains(endpoint));
    CHECK_THAT(msg, Catch::Contains("missing"));
  }
  c.set("missing", "found");
  CHECK(c.get("missing") == "found");
}

TEST_CASE("a queue_pop on an empty queue times out and the client carries on", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK_THROWS_AS(c.queue_pop("empty", milliseconds(50)), TimeoutError);
  c.queue_push("empty", "x");
  CHECK(c.queue_pop("empty") == "x");
}

TEST_CASE("a barrier that is never completed times out and the client carries on", "[server]") {
  ServerFixture fx;
  StoreClient c = fx.client();
  CHECK_THROWS_AS(c.barrier("lonely", 2, milliseconds(50)), TimeoutError);
  CHECK(c.ping() >= milliseconds(0));
  // A second arrival completes it; the first one had cancelled, so only this
  // client is told, and exactly once.
  StoreClient d = fx.client();
  CHECK_NOTHROW(d.barrier("lonely", 2));
  CHECK(c.add("after", 1) == 1);
}

TEST_CASE("stop from another thread makes run return and closes every connection", "[server]") {
  ServerFixture fx;
  StoreClient idle = fx.client();
  StoreClient waiter = fx.client();
  RawConnection raw(fx.port());
  const uint64_t before = fx.stats().requests;
  Background blocked([&] { waiter.wait({"never"}); });
  REQUIRE(fx.requests_reach(before + 1));

  std::thread([&] { fx.server().stop(); }).join();
  REQUIRE(fx.wait_until_run_returns());
  CHECK(fx.stats().connections_open == 0);

  // The waiting client sees the connection go, not a hang or a timeout.
  const std::string err = blocked.join();
  CHECK_FALSE(err.empty());
  CHECK(raw.closed_by_server());
  CHECK_THROWS_AS(idle.ping(), NetworkError);
  // Stopping again is harmless.
  fx.server().stop();
}

TEST_CASE("a waiting client sees a NetworkError when the server stops", "[server]") {
  ServerFixture fx;
  StoreClient waiter = fx.client();
  const uint64_t before = fx.stats().requests;
  bool network_error = false;
  std::thread t([&] {
    try {
      waiter.wait({"never"});
    } catch (const NetworkError&) {
      network_error = true;
    } catch (...) {
    }
  });
  REQUIRE(fx.requests_reach(before + 1));
  fx.stop();
  t.join();
  CHECK(network_error);
}

TEST_CASE("a stop requested before run makes run return at once", "[server]") {
  elasticrun::store::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  elasticrun::store::Server server(o);
  server.bind();
  server.stop();
  std::promise<void> done;
  auto returned = done.get_future();
  std::thread t([&] {
    server.run();
    done.set_value();
  });
  const bool ok = returned.wait_for(kPatience) == std::future_status::ready;
  if (!ok) server.stop();  // unblock the thread so the test can end
  t.join();
  CHECK(ok);
}

TEST_CASE("an add on a value that is not an integer drops only that client", "[server]") {
  ServerFixture fx;
  StoreClient bystander = fx.client();
  bystander.set("text", "abc");
  bystander.set("max", "9223372036854775807");
  const uint64_t dropped = fx.stats().connections_dropped;
  SECTION("not a number") {
    StoreClient c = fx.client();
    CHECK_THROWS_AS(c.add("text", 1), NetworkError);
  }
  SECTION("the sum overflows") {
    StoreClient c = fx.client();
    CHECK_THROWS_AS(c.add("max", 1), NetworkError);
  }
  SECTION("a barrier on a key that holds text") {
    StoreClient c = fx.client();
    CHECK_THROWS_AS(c.barrier("text", 2), NetworkError);
  }
  CHECK(fx.eventually([&](const auto& s) { return s.connections_dropped == dropped + 1; }));
  CHECK(bystander.get("text") == "abc");
  CHECK(bystander.get("max") == "9223372036854775807");
  CHECK(bystander.add("fine", 1) == 1);
}
