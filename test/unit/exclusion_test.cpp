// Bad nodes (health/exclusion) and stragglers (health/straggler).
#include "health/exclusion.hpp"

#include <catch2/catch.hpp>

#include "elasticrun/errors.hpp"
#include "health/straggler.hpp"

using namespace elasticrun::health;
using namespace std::chrono_literals;

namespace {
constexpr int64_t kT0 = 1'700'000'000'000;
ExclusionPolicy policy() {
  ExclusionPolicy p;
  p.faults = 3;
  p.window = 60s;
  p.cooldown = 10s;
  return p;
}
}  // namespace

TEST_CASE("a node is excluded after N faults within the window, not N spread out", "[exclusion]") {
  ExclusionState s;
  CHECK_FALSE(s.record_fault("a", kT0, policy(), "hang"));
  CHECK_FALSE(s.record_fault("a", kT0 + 70'000, policy(), "hang"));  // the first left the window
  CHECK_FALSE(s.record_fault("a", kT0 + 80'000, policy(), "hang"));
  CHECK(s.record_fault("a", kT0 + 90'000, policy(), "exitcode 1"));
  CHECK(s.excluded("a", kT0 + 90'000));
  CHECK_FALSE(s.excluded("b", kT0 + 90'000));
  CHECK_FALSE(s.excluded("a", kT0 + 100'001));  // 10 s later: readmitted by the cooldown
  REQUIRE(s.excluded_at(kT0 + 95'000).size() == 1);
  CHECK_THAT(s.excluded_at(kT0 + 95'000)[0].second.reason,
             Catch::Matchers::Contains("3 faults within 60 s, the last: exitcode 1"));
}

TEST_CASE("each repeat of an exclusion lasts twice as long as the one before", "[exclusion]") {
  ExclusionState s;
  s.exclude("a", kT0, policy(), "straggler");
  CHECK(s.nodes().at("a").excluded_until_ms == kT0 + 10'000);
  s.exclude("a", kT0 + 20'000, policy(), "straggler");
  CHECK(s.nodes().at("a").excluded_until_ms == kT0 + 20'000 + 20'000);
  s.exclude("a", kT0 + 50'000, policy(), "straggler");
  CHECK(s.nodes().at("a").excluded_until_ms == kT0 + 50'000 + 40'000);
}

TEST_CASE("a readmitted node is back at once but a relapse waits longer", "[exclusion]") {
  ExclusionState s;
  s.exclude("a", kT0, policy(), "gpu");
  REQUIRE(s.readmit("a"));
  CHECK_FALSE(s.excluded("a", kT0 + 1));
  CHECK_FALSE(s.readmit("nobody"));
  s.exclude("a", kT0 + 5, policy(), "gpu");
  CHECK(s.nodes().at("a").excluded_until_ms == kT0 + 5 + 20'000);
}

TEST_CASE("with faults 0 workers' faults never exclude", "[exclusion]") {
  ExclusionPolicy p = policy();
  p.faults = 0;
  ExclusionState s;
  for (int i = 0; i < 10; ++i) CHECK_FALSE(s.record_fault("a", kT0 + i, p, "x"));
}

TEST_CASE("the exclusion state reads back, and a malformed one is an error", "[exclusion]") {
  ExclusionState s;
  s.record_fault("10.0.0.1", kT0, policy(), "hang of \"rank\" 3");
  s.exclude("10.0.0.2", kT0, policy(), "straggler");
  const ExclusionState back = ExclusionState::parse(s.serialize());
  REQUIRE(back.nodes().size() == 2);
  CHECK(back.nodes().at("10.0.0.1").fault_times_ms == std::vector<int64_t>{kT0});
  CHECK(back.nodes().at("10.0.0.1").reason == "hang of \"rank\" 3");
  CHECK(back.excluded("10.0.0.2", kT0 + 1));
  CHECK_THROWS_AS(ExclusionState::parse("{"), elasticrun::ConfigError);
  CHECK_THROWS_AS(ExclusionState::parse("{\"version\": 1}"), elasticrun::ConfigError);
}

TEST_CASE("a node slower than the others for N new samples in a row is a straggler",
          "[straggler]") {
  StragglerDetector d({1.5, 3});
  auto look = [&](int64_t step, uint32_t slow_us) {
    return d.observe({{"a", step, 100'000}, {"b", step, 100'000}, {"c", step, slow_us}});
  };
  CHECK_FALSE(look(1, 200'000));
  CHECK_FALSE(look(1, 200'000));  // the same step: no new point
  CHECK_FALSE(look(2, 200'000));
  CHECK_FALSE(look(3, 120'000));  // within the factor: the count starts over
  CHECK_FALSE(look(4, 200'000));
  CHECK_FALSE(look(5, 200'000));
  const auto v = look(6, 200'000);
  REQUIRE(v);
  CHECK(v->host == "c");
  CHECK_THAT(v->message, Catch::Matchers::Contains("compute time 200.0 ms"));
}

TEST_CASE("with two nodes each is compared with the other", "[straggler]") {
  StragglerDetector d({1.5, 2});
  CHECK_FALSE(d.observe({{"a", 1, 100'000}, {"b", 1, 300'000}}));
  const auto v = d.observe({{"a", 2, 100'000}, {"b", 2, 300'000}});
  REQUIRE(v);
  CHECK(v->host == "b");
}

TEST_CASE("nodes without compute times and a disabled monitor flag nobody", "[straggler]") {
  StragglerDetector off({0, 1});
  CHECK_FALSE(off.observe({{"a", 1, 1}, {"b", 1, 1'000'000}}));
  StragglerDetector d({1.5, 1});
  CHECK_FALSE(d.observe({{"a", 1, 0}, {"b", 1, 0}}));
  CHECK_FALSE(d.observe({{"a", 2, 100}, {"b", 2, 0}}));
}
