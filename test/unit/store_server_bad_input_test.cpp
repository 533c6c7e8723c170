// The store server against bad input. Whatever one connection sends, it can
// lose only its own connection: a client connected before and one connected
// after keep being served, and the server counts the connections it drops.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server_fixture.hpp"

using elasticrun::StoreClient;
using elasticrun::store::QueryType;
using elasticrun::store::RequestWriter;
using elasticrun::store::ServerOptions;
using elasticrun::test::modern_connection;
using elasticrun::test::RawConnection;
using elasticrun::test::require_dropped;
using elasticrun::test::require_store_still_serves;
using elasticrun::test::ServerFixture;
using elasticrun::test::type_byte;
namespace frames = elasticrun::test::frames;

TEST_CASE("random bytes from many connections do not disturb a well-behaved client", "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  const uint64_t open_before = fx.stats().connections_open;
  std::vector<RawConnection> noise;
  for (uint32_t seed = 1; seed <= 64; ++seed) {
    std::mt19937 rng(seed);
    RawConnection& c = noise.emplace_back(fx.port());
    // Half speak the modern dialect first, so both parsers get garbage.
    if (seed % 2 == 0) c.send(frames::validate());
    std::string junk(1 + rng() % 4096, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    c.send(junk);
  }
  require_store_still_serves(fx, before);
  noise.clear();
  CHECK(fx.eventually([&](const auto& s) { return s.connections_open == open_before; }));
  require_store_still_serves(fx, before);
}

TEST_CASE("a frame cut short by a close is forgotten, and not counted as a drop", "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  const auto at_start = fx.stats();
  {
    RawConnection c = modern_connection(fx);
    std::string f;
    RequestWriter(f).type(QueryType::kSet).u64(6);
    c.send(f + "/trun");  // key of 6 bytes, 5 sent
  }
  {
    RawConnection c = modern_connection(fx);
    std::string f;
    RequestWriter(f).type(QueryType::kSet).bytes("/trunc").u64(1000);
    c.send(f + std::string(500, 'v'));  // value of 1000 bytes, 500 sent
  }
  CHECK(fx.eventually(
      [&](const auto& s) { return s.connections_open == at_start.connections_open; }));
  CHECK(fx.stats().connections_dropped == at_start.connections_dropped);
  CHECK_FALSE(before.check({"trun"}));
  CHECK_FALSE(before.check({"trunc"}));
  require_store_still_serves(fx, before);
}

TEST_CASE("a key length of 2^63 gets the connection dropped without waiting for the key",
          "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c = modern_connection(fx);
  std::string f;
  RequestWriter(f).type(QueryType::kGet).u64(1ull << 63);
  c.send(f);
  require_dropped(fx, c, dropped);
  require_store_still_serves(fx, before);
}

TEST_CASE("a value over max_value_size gets the connection dropped, one at the limit is stored",
          "[server]") {
  ServerOptions o;
  o.limits.max_value_size = 1024;
  ServerFixture fx(o);
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c = modern_connection(fx);
  c.send(frames::set("/big", std::string(1025, 'x')));
  require_dropped(fx, c, dropped);
  require_store_still_serves(fx, before);
  CHECK_FALSE(before.check({"big"}));
  before.set("at-limit", std::string(1024, 'y'));
  CHECK(before.get("at-limit") == std::string(1024, 'y'));
}

TEST_CASE("values that together exceed max_request_size get the connection dropped", "[server]") {
  ServerOptions o;
  o.limits.max_value_size = 1024;
  o.limits.max_request_size = 2048;
  ServerFixture fx(o);
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c = modern_connection(fx);
  std::string f;
  RequestWriter w(f);
  w.type(QueryType::kMultiSet).u64(3);
  for (const char* k : {"/m1", "/m2", "/m3"}) w.bytes(k).bytes(std::string(1000, 'm'));
  c.send(f);
  require_dropped(fx, c, dropped);
  CHECK_FALSE(before.check({"m1"}));
  require_store_still_serves(fx, before);
}

TEST_CASE("an append that would grow a value past max_value_size gets the connection dropped",
          "[server]") {
  ServerOptions o;
  o.limits.max_value_size = 1024;
  ServerFixture fx(o);
  StoreClient before = fx.client();
  before.set("log", std::string(600, 'a'));
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c = modern_connection(fx);
  std::string f;
  RequestWriter(f).type(QueryType::kAppend).bytes("/log").bytes(std::string(600, 'b'));
  c.send(f);
  require_dropped(fx, c, dropped);
  CHECK(before.get("log") == std::string(600, 'a'));
  require_store_still_serves(fx, before);
}

TEST_CASE("more keys than max_keys_per_request get the connection dropped", "[server]") {
  ServerOptions o;
  o.limits.max_keys_per_request = 4;
  ServerFixture fx(o);
  StoreClient before = fx.client();
  before.multi_set({"a", "b", "c", "d"}, {"1", "2", "3", "4"});

  SECTION("five keys in a MULTI_GET") {
    const uint64_t dropped = fx.stats().connections_dropped;
    RawConnection c = modern_connection(fx);
    c.send(frames::keyed(QueryType::kMultiGet, {"/a", "/b", "/c", "/d", "/e"}));
    require_dropped(fx, c, dropped);
  }
  SECTION("a count of 2^63 in a CHECK, with no keys behind it") {
    const uint64_t dropped = fx.stats().connections_dropped;
    RawConnection c = modern_connection(fx);
    std::string f;
    RequestWriter(f).type(QueryType::kCheck).u64(1ull << 63);
    c.send(f);
    require_dropped(fx, c, dropped);
  }
  // Exactly at the limit is fine.
  CHECK(before.check({"a", "b", "c", "d"}));
  CHECK(before.multi_get({"a", "b", "c", "d"}) == std::vector<std::string>{"1", "2", "3", "4"});
  require_store_still_serves(fx, before);
}

TEST_CASE("an unknown query type gets the connection dropped", "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  SECTION("200 after the handshake") {
    RawConnection c = modern_connection(fx);
    c.send(type_byte(200));
    require_dropped(fx, c, dropped);
  }
  SECTION("19, one past BARRIER, after the handshake") {
    RawConnection c = modern_connection(fx);
    c.send(type_byte(19));
    require_dropped(fx, c, dropped);
  }
  SECTION("200 from a legacy client") {
    RawConnection c(fx.port());
    c.send(type_byte(200));
    require_dropped(fx, c, dropped);
  }
  require_store_still_serves(fx, before);
}

TEST_CASE("a VALIDATE with a wrong magic after the handshake gets the connection dropped",
          "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c = modern_connection(fx);
  c.send(frames::validate(0xDEADBEEF));
  require_dropped(fx, c, dropped);
  require_store_still_serves(fx, before);
}

TEST_CASE(
    "an opening VALIDATE with a wrong magic is read as a legacy SET and dropped for its key length",
    "[server]") {
  // Type 0 is SET for PyTorch < 2.2, so the magic becomes the low half of a
  // key length: 0xDEADBEEF bytes, over the key limit.
  ServerFixture fx;
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c(fx.port());
  c.send(frames::validate(0xDEADBEEF) + std::string(4, '\0'));
  require_dropped(fx, c, dropped);
  require_store_still_serves(fx, before);
}

TEST_CASE("a client that vanishes during a WAIT leaves the key usable", "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  const auto at_start = fx.stats();

  SECTION("the server notices the close before the key is set") {
    {
      RawConnection c = modern_connection(fx);
      c.send(frames::wait({"/gone"}) + frames::ping(1));
      REQUIRE(c.read_u32() == 1);  // the WAIT is registered
    }
    REQUIRE(fx.eventually(
        [&](const auto& s) { return s.connections_open == at_start.connections_open; }));
    before.set("gone", "v");
  }
  SECTION("the key is set while the close is still on its way") {
    {
      RawConnection c = modern_connection(fx);
      c.send(frames::wait({"/gone"}) + frames::ping(1));
      REQUIRE(c.read_u32() == 1);
    }
    before.set("gone", "v");
  }
  CHECK(before.get("gone") == "v");
  CHECK(fx.eventually(
      [&](const auto& s) { return s.connections_open == at_start.connections_open; }));
  CHECK(fx.stats().connections_dropped == at_start.connections_dropped);
  require_store_still_serves(fx, before);
}

TEST_CASE("a client that stalls in the middle of a huge frame does not block others", "[server]") {
  ServerFixture fx;
  StoreClient before = fx.client();
  constexpr size_t kValue = 4 << 20;
  RawConnection slow = modern_connection(fx);
  std::string head;
  RequestWriter(head).type(QueryType::kSet).bytes("/huge").u64(kValue);
  REQUIRE(slow.send(head + std::string(kValue / 4, 'h')));
  require_store_still_serves(fx, before);
  CHECK_FALSE(before.check({"huge"}));
  // The frame completes later and is stored whole.
  REQUIRE(slow.send(std::string(kValue - kValue / 4, 'h')));
  slow.send(frames::ping(2));
  CHECK(slow.read_u32() == 2);
  CHECK(before.get("huge") == std::string(kValue, 'h'));
}

TEST_CASE("partial frames past max_buffered_bytes get that connection dropped", "[server]") {
  ServerOptions o;
  o.max_buffered_bytes = 64 * 1024;
  ServerFixture fx(o);
  StoreClient before = fx.client();
  const uint64_t dropped = fx.stats().connections_dropped;
  RawConnection c = modern_connection(fx);
  std::string head;
  RequestWriter(head).type(QueryType::kSet).bytes("/x").u64(1 << 20);
  c.send(head + std::string(256 * 1024, 'x'));  // may be cut off: the server closes
  require_dropped(fx, c, dropped);
  require_store_still_serves(fx, before);
  // Its buffer was released: a large value from a well-behaved client fits.
  before.set("fits", std::string(32 * 1024, 'f'));
  CHECK(before.get("fits").size() == 32 * 1024);
}

TEST_CASE("a client that does not read its replies gets all of them later, in order", "[server]") {
  ServerOptions o;
  o.max_pending_reply_bytes = 4096;
  ServerFixture fx(o);
  StoreClient before = fx.client();
  RawConnection c = modern_connection(fx);
  constexpr uint32_t kPings = 200000;
  std::string burst;
  for (uint32_t i = 0; i < kPings; ++i) burst += frames::ping(i);
  // The server stops reading this client while its replies pile up, so the
  // send blocks until we read: it needs its own thread.
  bool sent = false;
  std::thread sender([&] { sent = c.send(burst); });
  require_store_still_serves(fx, before);
  uint32_t in_order = 0;
  for (uint32_t i = 0; i < kPings; ++i) {
    if (c.read_u32() != i) break;
    ++in_order;
  }
  sender.join();
  CHECK(sent);
  CHECK(in_order == kPings);
  CHECK(c.nothing_pending());
}
