// The courier (agent/courier): errands run in order on its own thread, with
// a connection only it uses; drain() waits for those posted so far; the
// destructor runs what is queued.
#include "agent/courier.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

using elasticrun::agent::Courier;

namespace {
struct FakeConnection {
  std::vector<int> seen;
  std::thread::id thread;
};
}  // namespace

TEST_CASE("errands run in order on the courier's thread", "[courier]") {
  auto conn = std::make_unique<FakeConnection>();
  FakeConnection* raw = conn.get();
  Courier<FakeConnection> courier(std::move(conn));
  for (int i = 0; i < 50; ++i) {
    courier.post([i](FakeConnection& c) {
      c.seen.push_back(i);
      c.thread = std::this_thread::get_id();
    });
  }
  courier.drain();
  REQUIRE(raw->seen.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(raw->seen[static_cast<size_t>(i)] == i);
  CHECK(raw->thread != std::this_thread::get_id());
}

TEST_CASE("drain waits for an errand that is still running", "[courier]") {
  Courier<FakeConnection> courier(std::make_unique<FakeConnection>());
  bool done = false;
  courier.post([&](FakeConnection&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done = true;
  });
  courier.drain();
  CHECK(done);
}

TEST_CASE("the courier's destructor runs what is queued before it stops", "[courier]") {
  int ran = 0;
  {
    Courier<FakeConnection> courier(std::make_unique<FakeConnection>());
    courier.post(
        [&](FakeConnection&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
    for (int i = 0; i < 5; ++i) courier.post([&](FakeConnection&) { ++ran; });
  }
  CHECK(ran == 5);
}
