// The attempt's inbox (agent/inbox): messages from other threads run on the
// loop, in order, including those posted before the loop attached.
#include "agent/inbox.hpp"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "agent/attempt.hpp"

using namespace elasticrun::agent;

namespace {

struct RecordingControl final : AttemptControl {
  std::vector<std::string> stops;
  elasticrun::supervisor::WorkerGroup group;
  void request_stop(const std::string& reason) override { stops.push_back(reason); }
  void report_fault(const elasticrun::health::Fault& f) override { stops.push_back(f.describe()); }
  const elasticrun::supervisor::WorkerGroup& workers() const override { return group; }
  int rank_offset() const override { return 0; }
  int restart_count() const override { return 0; }
};

// A loop with the inbox attached, run until `want` messages have run.
void run_until(Inbox& inbox, RecordingControl& control, size_t want) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  struct Ctx {
    Inbox* inbox;
    RecordingControl* control;
    size_t want;
  } ctx{&inbox, &control, want};
  uv_async_t wakeup;
  wakeup.data = &ctx;
  uv_async_init(&loop, &wakeup, [](uv_async_t* h) {
    auto* c = static_cast<Ctx*>(h->data);
    c->inbox->run_pending(*c->control);
    if (c->control->stops.size() >= c->want) uv_close(reinterpret_cast<uv_handle_t*>(h), nullptr);
  });
  inbox.attach(&wakeup);
  uv_run(&loop, UV_RUN_DEFAULT);
  inbox.detach();
  uv_loop_close(&loop);
}

}  // namespace

TEST_CASE("a message posted before the loop attaches runs when it does", "[inbox]") {
  Inbox inbox;
  inbox.post([](AttemptControl& c) { c.request_stop("early"); });
  RecordingControl control;
  run_until(inbox, control, 1);
  REQUIRE(control.stops == std::vector<std::string>{"early"});
}

TEST_CASE("messages from another thread run on the loop in the order posted", "[inbox]") {
  Inbox inbox;
  RecordingControl control;
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) {
      inbox.post([i](AttemptControl& c) { c.request_stop(std::to_string(i)); });
    }
  });
  run_until(inbox, control, 100);
  poster.join();
  REQUIRE(control.stops.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(control.stops[static_cast<size_t>(i)] == std::to_string(i));
}

TEST_CASE("a message may post another, which runs after it", "[inbox]") {
  Inbox inbox;
  RecordingControl control;
  inbox.post([&](AttemptControl& c) {
    c.request_stop("first");
    inbox.post([](AttemptControl& c2) { c2.request_stop("second"); });
  });
  run_until(inbox, control, 2);
  REQUIRE(control.stops == std::vector<std::string>{"first", "second"});
}
