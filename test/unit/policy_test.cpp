// The elastic policy (elastic/policy): allowed sizes, the order of decisions,
// stabilisation, the stable period and its backoff, the persisted state.
// Every expected value is computed by hand in the comments next to it.
#include "elastic/policy.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"

using namespace elasticrun::elastic;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;

namespace {

// Sizes min + k*step up to max; scaling timeout 10s, faulty scale-down
// timeout 30s, stable period 30s doubling up to 600s.
PolicyConfig sizes(int min, int max, int step = 1) {
  PolicyConfig c;
  c.min_replicas = min;
  c.max_replicas = max;
  c.increment_step = step;
  c.scaling_timeout = 10s;
  c.faulty_scale_down_timeout = 30s;
  c.min_stable_period = 30s;
  c.max_stable_period = 600s;
  return c;
}

PolicyConfig discrete(int min, int max, std::vector<int> values) {
  PolicyConfig c = sizes(min, max);
  c.discrete_values = std::move(values);
  return c;
}

void check_config_error(const PolicyConfig& c, const std::string& flag) {
  INFO("expecting an error naming " << flag);
  CHECK_THROWS_AS(c.validate(), ConfigError);
  CHECK_THROWS_WITH(c.validate(), Contains(flag));
}

// Observation{.now = ..., .current = ...} would read as well, but GCC 12 warns
// about every field a designated initializer leaves out.
struct At {
  Observation o;
  At& waiting(int n) { return o.waiting = n, *this; }
  At& leaving(int n) { return o.leaving = n, *this; }
  At& lost(int n) { return o.lost = n, *this; }
  At& scale(int n) { return o.scale_request = n, *this; }
  At& release(int n) { return o.release_request = n, *this; }
  operator Observation() const { return o; }
};

At at(TimeMs now, int current) {
  At a;
  a.o.now = now;
  a.o.current = current;
  return a;
}

PolicyState state(std::optional<TimeMs> last, int level, std::optional<int> cap,
                  std::optional<TimeMs> waiting_since) {
  PolicyState s;
  s.last_event = last;
  s.backoff_level = level;
  s.cap = cap;
  s.waiting_since = waiting_since;
  return s;
}

// Drives voluntary events through operator scale requests that always change
// the size (2 <-> 3), for tests about the stable period.
struct Operator {
  Policy& policy;
  int current = 2;

  void event_at(TimeMs t) {
    const int to = current == 2 ? 3 : 2;
    Decision d = policy.decide(at(t, current).waiting(1).scale(to));
    REQUIRE(d.target == to);
    current = to;
  }
};

}  // namespace

TEST_CASE("allowed sizes step up from the minimum and stop at the maximum without adding it",
          "[policy]") {
  PolicyConfig c = sizes(2, 9, 3);
  CHECK(allowed_sizes(c) == std::vector<int>{2, 5, 8});
  CHECK(smallest_allowed(c) == 2);
  CHECK(largest_allowed_at_most(c, 1) == std::nullopt);
  CHECK(largest_allowed_at_most(c, 2) == 2);
  CHECK(largest_allowed_at_most(c, 4) == 2);
  CHECK(largest_allowed_at_most(c, 5) == 5);
  CHECK(largest_allowed_at_most(c, 9) == 8);
  CHECK(largest_allowed_at_most(c, 100) == 8);
}

TEST_CASE("discrete values are the allowed sizes exactly and the step is ignored", "[policy]") {
  PolicyConfig c = discrete(1, 8, {2, 4, 8});
  c.increment_step = 3;
  CHECK(allowed_sizes(c) == std::vector<int>{2, 4, 8});
  CHECK(smallest_allowed(c) == 2);
  CHECK(largest_allowed_at_most(c, 1) == std::nullopt);
  CHECK(largest_allowed_at_most(c, 3) == 2);
  CHECK(largest_allowed_at_most(c, 7) == 4);
  CHECK(largest_allowed_at_most(c, 9) == 8);
}

TEST_CASE("a config that cannot work is refused with the flag to fix", "[policy]") {
  CHECK_NOTHROW(sizes(2, 8, 2).validate());
  CHECK_NOTHROW(discrete(2, 8, {2, 4, 8}).validate());

  check_config_error(sizes(0, 4), "--min-replicas");
  check_config_error(sizes(3, 2), "--min-replicas/--max-replicas");
  check_config_error(sizes(1, 4, 0), "--replica-increment-step");
  check_config_error(discrete(2, 8, {2, 16}), "--replica-discrete-values");
  check_config_error(discrete(2, 8, {1, 4}), "--replica-discrete-values");
  check_config_error(discrete(2, 8, {4, 2}), "--replica-discrete-values");
  check_config_error(discrete(2, 8, {2, 2}), "--replica-discrete-values");

  PolicyConfig c = sizes(1, 4);
  c.scaling_timeout = -1ms;
  check_config_error(c, "--scaling-timeout");
  c = sizes(1, 4);
  c.faulty_scale_down_timeout = -1ms;
  check_config_error(c, "--faulty-scale-down-timeout");
  c = sizes(1, 4);
  c.max_stable_period = 10s;  // below the 30s minimum
  check_config_error(c, "--max-stable-period");

  CHECK_THROWS_AS(Policy(sizes(3, 2)), ConfigError);
}

TEST_CASE("a lost member is replaced at once when a spare is waiting", "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 4).waiting(1).lost(1));
  CHECK(d.action == Action::kReplace);
  CHECK(d.target == 4);
  CHECK(d.wait_for_replacements == 0ms);
  CHECK(d.release == 0);
}

TEST_CASE("a lost member without a spare waits the faulty scale-down timeout for one", "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 4).waiting(1).lost(2));
  CHECK(d.action == Action::kReplace);
  CHECK(d.target == 4);
  CHECK(d.wait_for_replacements == 30s);
}

TEST_CASE("losing members below the minimum still asks for a replacement round and says so",
          "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 2).lost(2));
  CHECK(d.action == Action::kReplace);
  CHECK(d.target == 2);
  CHECK(d.wait_for_replacements == 30s);
  CHECK_THAT(d.reason, Contains("--min-replicas 2"));
}

TEST_CASE("losses are never delayed by the stable period and leave the backoff alone", "[policy]") {
  Policy p(sizes(2, 8));
  // A scale-up at 10s (2 -> 3): the stable period runs until 40s.
  REQUIRE(p.decide(at(0s, 2).waiting(1)).action == Action::kNone);
  REQUIRE(p.decide(at(10s, 2).waiting(1)).action == Action::kScaleUp);
  const PolicyState before = p.state();

  Decision d = p.decide(at(11s, 3).lost(1));
  CHECK(d.action == Action::kReplace);
  CHECK(d.target == 3);
  d = p.decide(at(12s, 3).leaving(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 2);
  CHECK(p.state() == before);
}

TEST_CASE("a loss restarts the stabilisation window of the agents still waiting", "[policy]") {
  Policy p(sizes(2, 8));
  // Two agents wait from 0s; at 5s a member is lost and one of them replaces it.
  REQUIRE(p.decide(at(0s, 4).waiting(2)).recheck_at == 10s);
  REQUIRE(p.decide(at(5s, 4).waiting(2).lost(1)).action == Action::kReplace);
  // The other one waits a full scaling timeout in the new round: 6s + 10s.
  Decision d = p.decide(at(6s, 4).waiting(1));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == 16s);
}

TEST_CASE("a leaving member ends the round gracefully and a waiting agent takes its place",
          "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 4).waiting(1).leaving(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 4);
  CHECK(d.release == 0);
}

TEST_CASE("a leaving member shrinks the job to the largest allowed size that remains", "[policy]") {
  Policy p(discrete(2, 4, {2, 4}));
  // 3 remain; 3 is not allowed.
  Decision d = p.decide(at(5s, 4).leaving(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 2);
}

TEST_CASE("departures never grow the job, however many agents wait", "[policy]") {
  Policy p(sizes(2, 8));
  // 3 remain and 3 wait: 6 could run, but growth waits for its stabilisation.
  Decision d = p.decide(at(5s, 4).waiting(3).leaving(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 4);
}

TEST_CASE(
    "when too few remain after departures the next round waits for replacements at the "
    "smallest allowed size",
    "[policy]") {
  Policy stepped(sizes(2, 8));
  Decision d = stepped.decide(at(5s, 2).leaving(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 2);
  CHECK_THAT(d.reason, Contains("waiting for replacements"));

  // The minimum 1 is not an allowed size here: the round waits for 2.
  Policy listed(discrete(1, 4, {2, 4}));
  d = listed.decide(at(5s, 2).leaving(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 2);
}

TEST_CASE("a release rounds down to an allowed size and frees at least what was asked",
          "[policy]") {
  Policy p(discrete(2, 8, {2, 4, 8}));
  // 8 - 3 = 5 is not allowed: 4, so 4 nodes go back.
  Decision d = p.decide(at(5s, 8).release(3));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 4);
  CHECK(d.release == 4);
  CHECK(p.state().cap == 4);
  CHECK_THAT(d.reason, Contains("5 is not an allowed size"));
}

TEST_CASE("a release that would go below the minimum is honoured only down to it", "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 4).release(3));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 2);
  CHECK(d.release == 2);
  CHECK(p.state().cap == 2);
  CHECK_THAT(d.reason, Contains("release of 3 nodes limited by --min-replicas"));

  // Already at the minimum: nothing to give back, and no event.
  d = p.decide(at(100s, 2).release(1));
  CHECK(d.action == Action::kNone);
  CHECK_THAT(d.reason, Contains("release of 1 node limited by --min-replicas"));
  CHECK(p.state().last_event == 5s);
}

TEST_CASE("operator requests are answered within the stable period and count for backoff",
          "[policy]") {
  Policy p(sizes(2, 8));
  REQUIRE(p.decide(at(0s, 2).waiting(1)).action == Action::kNone);
  REQUIRE(p.decide(at(10s, 2).waiting(1)).action == Action::kScaleUp);
  // 5s after the scale-up, well inside its 30s stable period.
  Decision d = p.decide(at(15s, 3).release(1));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 2);
  // 5s < 2 * 30s: the period doubles.
  CHECK(p.state().last_event == 15s);
  CHECK(p.state().backoff_level == 1);
  CHECK(p.stable_period() == 60s);
}

TEST_CASE("after a release waiting agents stay spares until the operator scales up again",
          "[policy]") {
  Policy p(sizes(2, 8));
  REQUIRE(p.decide(at(0s, 8).release(4)).target == 4);

  // Four agents wait far past every timeout: the cap of 4 keeps them spares.
  Decision d = p.decide(at(1000s, 4).waiting(4));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == std::nullopt);
  CHECK(p.state().waiting_since == std::nullopt);

  // The operator lifts the cap: all of them at once.
  d = p.decide(at(1001s, 4).waiting(4).scale(8));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 8);
  CHECK(p.state().cap == 8);
}

TEST_CASE(
    "a scale request beyond the agents present grows as far as it can and keeps the cap "
    "for later joiners",
    "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(100s, 4).waiting(1).scale(8));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 5);
  CHECK(p.state().cap == 8);
  CHECK(p.state().last_event == 100s);

  // Two more join at 101s: stabilised at 111s, stable period over at 130s.
  d = p.decide(at(101s, 5).waiting(2));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == 130s);
  d = p.decide(at(130s, 5).waiting(2));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 7);
}

TEST_CASE("a scale request below the current size releases the most recent replicas", "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 8).scale(3));
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 3);
  CHECK(d.release == 5);

  // Below the minimum and above the maximum: clamped, not refused.
  d = p.decide(at(6s, 3).scale(0));
  CHECK(d.target == 2);
  CHECK(p.state().cap == 2);
  d = p.decide(at(7s, 2).waiting(9).scale(100));
  CHECK(d.target == 8);
  CHECK(p.state().cap == 8);
}

TEST_CASE("a scale request to the size already running changes only the cap", "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(5s, 4).scale(6));
  CHECK(d.action == Action::kNone);
  CHECK(p.state().cap == 6);
  CHECK(p.state().last_event == std::nullopt);
}

TEST_CASE(
    "losses come before departures, departures before releases, releases before scale "
    "requests",
    "[policy]") {
  const Observation all = at(5s, 8).leaving(1).lost(1).scale(8).release(3);
  Policy p1(sizes(2, 8));
  // The release still sets the cap (8 - 3 = 5); 6 survive, one gives its place back.
  Decision d = p1.decide(all);
  CHECK(d.action == Action::kReplace);
  CHECK(d.target == 5);
  CHECK(d.wait_for_replacements == 0ms);
  CHECK(d.release == 1);

  Observation no_loss = all;
  no_loss.lost = 0;
  Policy p2(sizes(2, 8));
  d = p2.decide(no_loss);
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 5);
  CHECK(d.release == 2);  // 7 remain after the departure
  CHECK(p2.state().last_event == std::nullopt);

  Observation no_departure = no_loss;
  no_departure.leaving = 0;
  Policy p3(sizes(2, 8));
  d = p3.decide(no_departure);
  CHECK(d.action == Action::kScaleDown);
  CHECK(d.target == 5);
  CHECK(d.release == 3);
  CHECK(p3.state().cap == 5);
  CHECK_THAT(d.reason, Contains("scale to 8 ignored"));
}

TEST_CASE("waiting agents are admitted after the scaling timeout of continuous waiting",
          "[policy]") {
  Policy p(sizes(2, 8));
  Decision d = p.decide(at(0s, 2).waiting(1));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == 10s);
  d = p.decide(at(9999ms, 2).waiting(1));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == 10s);
  d = p.decide(at(10s, 2).waiting(1));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 3);
  // The first event has nothing before it: the level stays 0.
  CHECK(p.state().last_event == 10s);
  CHECK(p.state().backoff_level == 0);
  CHECK(p.state().waiting_since == std::nullopt);
}

TEST_CASE("an agent that stops waiting restarts the stabilisation window", "[policy]") {
  Policy p(sizes(2, 8));
  REQUIRE(p.decide(at(0s, 2).waiting(1)).recheck_at == 10s);
  Decision d = p.decide(at(5s, 2).waiting(0));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == std::nullopt);
  d = p.decide(at(6s, 2).waiting(1));
  CHECK(d.recheck_at == 16s);
}

TEST_CASE("a scale-up waits for the later of stabilisation and the stable period", "[policy]") {
  Policy p(sizes(2, 8));
  REQUIRE(p.decide(at(90s, 2).waiting(1)).action == Action::kNone);
  REQUIRE(p.decide(at(100s, 2).waiting(1)).action == Action::kScaleUp);

  // A joiner at 105s is stabilised at 115s, but the stable period runs to 130s.
  Decision d = p.decide(at(105s, 3).waiting(1));
  CHECK(d.recheck_at == 130s);
  CHECK_THAT(d.reason, Contains("stable period"));
  d = p.decide(at(129999ms, 3).waiting(1));
  CHECK(d.action == Action::kNone);

  // One that arrives at 125s is stabilised only at 135s.
  Policy q(p.config(), p.state());
  q.decide(at(110s, 3).waiting(0));
  d = q.decide(at(125s, 3).waiting(1));
  CHECK(d.recheck_at == 135s);
  CHECK_THAT(d.reason, Contains("stabilisation"));
  d = q.decide(at(135s, 3).waiting(1));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 4);
}

TEST_CASE("a third node waits as a spare when the allowed sizes are 2 and 4", "[policy]") {
  Policy p(discrete(2, 4, {2, 4}));
  Decision d = p.decide(at(0s, 2).waiting(1));
  CHECK(d.action == Action::kNone);
  CHECK(d.target == 2);
  CHECK(d.recheck_at == std::nullopt);
  CHECK(p.state().waiting_since == std::nullopt);
  CHECK_THAT(d.reason, Contains("spare: 3 is not an allowed size"));

  // A fourth makes 4 reachable: its stabilisation starts now.
  d = p.decide(at(3s, 2).waiting(2));
  CHECK(d.recheck_at == 13s);
  d = p.decide(at(13s, 2).waiting(2));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 4);
}

TEST_CASE("agents waiting at the maximum size are spares", "[policy]") {
  Policy p(sizes(2, 4));
  Decision d = p.decide(at(0s, 4).waiting(2));
  CHECK(d.action == Action::kNone);
  CHECK(d.recheck_at == std::nullopt);
  CHECK_THAT(d.reason, Contains("spares: the size limit is 4"));
  d = p.decide(at(1000s, 4).waiting(2));
  CHECK(d.action == Action::kNone);
}

TEST_CASE(
    "the stable period doubles with close events, stops at the maximum and resets after "
    "a calm",
    "[policy]") {
  Policy p(sizes(2, 8));
  Operator op{p};
  CHECK(p.stable_period() == 30s);
  op.event_at(0s);  // the first event: nothing to compare with
  CHECK(p.state().backoff_level == 0);

  // Each 10s after the previous: within two periods, so the period doubles.
  const std::vector<std::chrono::seconds> expected = {60s, 120s, 240s, 480s, 600s, 600s};
  for (size_t i = 0; i < expected.size(); ++i) {
    op.event_at(std::chrono::seconds(10 * (i + 1)));
    INFO("event " << i + 2);
    CHECK(p.stable_period() == expected[i]);
  }
  CHECK(p.state().backoff_level == 5);  // 30s * 2^5 = 960s, capped at 600s

  // At the maximum, 1199s after the last (at 60s) is still within two periods.
  op.event_at(1259s);
  CHECK(p.state().backoff_level == 5);
  // 1200s of calm: two periods and at least the maximum: back to 30s.
  op.event_at(2459s);
  CHECK(p.state().backoff_level == 0);
  CHECK(p.stable_period() == 30s);

  // Between two periods (60s) and the maximum (600s): the level holds.
  op.event_at(2469s);
  REQUIRE(p.state().backoff_level == 1);
  op.event_at(2669s);
  CHECK(p.state().backoff_level == 1);
}

TEST_CASE("a node that joins and leaves every second gets growing delays, not an event a second",
          "[policy]") {
  PolicyConfig c = sizes(2, 8);
  c.scaling_timeout = 1s;
  Policy p(c);
  // Each second the flapping node either waits to join (and may be admitted)
  // or, once a member, announces it is leaving.
  bool member = false;
  std::vector<long long> ups;
  int downs = 0;
  for (int t = 0; t <= 3600; ++t) {
    const TimeMs now = std::chrono::seconds(t);
    if (member) {
      Decision d = p.decide(at(now, 3).leaving(1));
      REQUIRE(d.action == Action::kScaleDown);
      ++downs;
      member = false;
    } else {
      Decision d = p.decide(at(now, 2).waiting(1));
      if (d.action == Action::kScaleUp) {
        ups.push_back(t);
        member = true;
      } else if (t == 3) {
        CHECK(d.recheck_at == 31s);  // the next scale-up, exactly
      }
    }
  }
  // Scale-ups 30, 60, 120, 240 and 480s apart, then every 600s.
  CHECK(ups == std::vector<long long>{1, 31, 91, 211, 451, 931, 1531, 2131, 2731, 3331});
  CHECK(downs == 10);
  CHECK(p.stable_period() == 600s);
}

TEST_CASE("a policy restored from its serialised state continues where the old leader stopped",
          "[policy]") {
  Policy old_leader(sizes(2, 8));
  // Two operator events 20s apart (level 1, period 60s), then a joiner at 30s.
  REQUIRE(old_leader.decide(at(0s, 2).waiting(1).scale(3)).target == 3);
  REQUIRE(old_leader.decide(at(20s, 3).waiting(1).scale(8)).target == 4);
  REQUIRE(old_leader.decide(at(30s, 4).waiting(1)).recheck_at == 80s);
  REQUIRE(old_leader.state().serialize() == "v1;last=20000;lvl=1;cap=8;ws=30000");

  Policy new_leader(old_leader.config(), PolicyState::parse(old_leader.state().serialize()));
  CHECK(new_leader.state() == old_leader.state());
  CHECK(new_leader.stable_period() == 60s);
  // Still waiting since 30s (stabilised at 40s); the stable period from 20s ends at 80s.
  Decision d = new_leader.decide(at(31s, 4).waiting(1));
  CHECK(d.recheck_at == 80s);
  d = new_leader.decide(at(80s, 4).waiting(1));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 5);
}

TEST_CASE("the policy state serialises to a short versioned text and parses back exactly",
          "[policy]") {
  CHECK(PolicyState{}.serialize() == "v1;lvl=0");
  const PolicyState full = state(123ms, 2, 8, 100ms);
  CHECK(full.serialize() == "v1;last=123;lvl=2;cap=8;ws=100");

  const std::vector<PolicyState> states = {
      PolicyState{},
      full,
      state(-5ms, 0, std::nullopt, 0ms),
      state(std::nullopt, 7, 1, std::nullopt),
      state(9223372036854775807ms, 0, 2147483647, std::nullopt),
  };
  for (const PolicyState& s : states) {
    INFO(s.serialize());
    CHECK(PolicyState::parse(s.serialize()) == s);
    CHECK(PolicyState::parse(s.serialize()).serialize() == s.serialize());
  }
}

TEST_CASE("parsing a policy state rejects every text serialise does not write", "[policy]") {
  const std::vector<std::string> garbage = {
      "",
      "v1",
      "v2;lvl=0",
      "V1;lvl=0",
      "v1;",
      "v1;lvl=0;",
      ";v1;lvl=0",
      "v1;;lvl=0",
      "v1;lvl",
      "v1;lvl=",
      "v1;lvl=x",
      "v1;lvl=01",
      "v1;lvl=+1",
      "v1;lvl= 1",
      "v1;lvl=1 ",
      "v1;lvl=-1",
      "v1;lvl=99999999999",
      "v1;lvl=0\n",
      "v1;last=;lvl=0",
      "v1;last=-0;lvl=0",
      "v1;last=99999999999999999999;lvl=0",
      "v1;lvl=0;cap=0",
      "v1;lvl=0;cap=-3",
      "v1;cap=3;lvl=0",
      "v1;lvl=0;lvl=0",
      "v1;lvl=0;ws=1;cap=2",
      "v1;lvl=0;foo=1",
      "v1;LVL=0",
      "v1;lvl=0;" + std::string(200, 'x'),
  };
  for (const std::string& text : garbage) {
    INFO(text);
    CHECK_THROWS_AS(PolicyState::parse(text), ConfigError);
  }
}

TEST_CASE("a cap written under another config is clamped into the current one", "[policy]") {
  Policy p(sizes(2, 4), state(std::nullopt, 0, 100, std::nullopt));
  REQUIRE(p.decide(at(0s, 2).waiting(5)).recheck_at == 10s);
  Decision d = p.decide(at(10s, 2).waiting(5));
  CHECK(d.action == Action::kScaleUp);
  CHECK(d.target == 4);
}
