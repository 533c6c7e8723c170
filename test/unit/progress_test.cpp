// What the agent makes of its workers' published steps (agent/progress).
#include "agent/progress.hpp"

#include <catch2/catch.hpp>

using elasticrun::agent::StepRate;
using namespace std::chrono_literals;

TEST_CASE("the step rate is measured over whole spans, not single samples", "[progress]") {
  StepRate rate(1000ms);
  const auto t0 = StepRate::Clock::time_point{} + 1h;
  rate.sample(t0, 10);
  rate.sample(t0 + 100ms, 11);  // a tenth of a span: no rate yet
  CHECK(rate.per_second() == 0);
  rate.sample(t0 + 2000ms, 30);
  CHECK(rate.per_second() == Approx(10.0));
}

TEST_CASE("a stalled or restarted count keeps the last rate", "[progress]") {
  StepRate rate(1000ms);
  const auto t0 = StepRate::Clock::time_point{} + 1h;
  rate.sample(t0, 0);
  rate.sample(t0 + 1000ms, 5);
  CHECK(rate.per_second() == Approx(5.0));
  rate.sample(t0 + 2000ms, 5);  // no step in a span
  CHECK(rate.per_second() == Approx(5.0));
  rate.sample(t0 + 3000ms, -1);  // a new round: nothing published yet
  CHECK(rate.per_second() == Approx(5.0));
}
