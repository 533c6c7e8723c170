// The capacity simulator (sim/): trace parsing, the cost model's accounting
// on small traces whose figures are computed by hand in the comments, the
// comparison policies, and determinism for a seed.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"
#include "sim/controller.hpp"
#include "sim/duration.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "sim/throughput.hpp"
#include "sim/timeline.hpp"
#include "sim/trace.hpp"
#include "sim_runs.hpp"

using namespace elasticrun::sim;
using elasticrun::sim::test::check_parse_error;
using elasticrun::sim::test::run;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;

namespace {

// Costs: a scale event 30 + 20 + 45 = 95 s down; a crash 20 + 45 = 65 s
// down plus the work since the last checkpoint.
const std::string kCosts =
    "checkpoint_save 30s\n"
    "checkpoint_load 45s\n"
    "restart 20s\n"
    "throughput 1:2000 2:3900 4:7600 8:14000\n";

// 4 nodes until 1h, then 8 until 2h.
const std::string kScaleUpAt1h =
    kCosts +
    "duration 2h\nnodes_max 8\n"
    "policy min=4 max=8 step=4 scaling_timeout=60s faulty=120s min_stable=300s max_stable=1h\n"
    "at 0 capacity 4\nat 1h capacity 8\n";

}  // namespace

TEST_CASE("durations take one or more number-and-unit terms and nothing else", "[sim]") {
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("90s") == 90s);
  CHECK(parse_duration("1h30m") == 90min);
  CHECK(parse_duration("1.5h") == 90min);
  CHECK(parse_duration("7d") == 7 * 24h);
  CHECK(parse_duration("0s") == 0ms);
  CHECK(parse_duration("0") == 0ms);
  CHECK_FALSE(parse_duration("30"));
  CHECK_FALSE(parse_duration("-1s"));
  CHECK_FALSE(parse_duration("1x"));
  CHECK_FALSE(parse_duration("s"));
  CHECK_FALSE(parse_duration(""));
  CHECK_FALSE(parse_duration("1000000000d"));
  CHECK(short_duration(0ms) == "0s");
  CHECK(short_duration(45s) == "45s");
  CHECK(short_duration(25min) == "25m");
  CHECK(short_duration(11h + 36min) == "11.6h");
  CHECK(short_duration(7 * 24h) == "7d");
}

TEST_CASE("throughput interpolates between points and extrapolates with the last slope", "[sim]") {
  const Throughput t({{1, 2000}, {2, 3900}, {4, 7600}, {8, 14000}});
  CHECK(t.at(0) == 0);
  CHECK(t.at(1) == 2000);
  CHECK(t.at(3) == Approx(5750));               // halfway from 3900 to 7600
  CHECK(t.at(6) == Approx(10800));              // halfway from 7600 to 14000
  CHECK(t.at(16) == Approx(14000 + 8 * 1600));  // (14000 - 7600) / 4 per node past 8
  CHECK(Throughput({{4, 8000}}).at(2) == Approx(4000));
  CHECK(Throughput({{4, 8000}}).at(8) == Approx(16000));
  CHECK_THROWS_AS(Throughput({{2, 10}, {2, 20}}), ConfigError);
}

TEST_CASE("trace errors name the file and line", "[sim]") {
  const std::string head = "duration 1h\nnodes_max 4\nthroughput 1:1\npolicy min=1 max=4\n";
  check_parse_error(head + "at 10m capacity 9\n", "t.trace:5:", "above nodes_max 4");
  check_parse_error(head + "at 10m explode 1\n", "t.trace:5:", "unknown event 'explode'");
  check_parse_error(head + "at 20m fail 1\nat 10m fail 1\n", "t.trace:6:", "time order");
  check_parse_error(head + "at 2h fail 1\n", "t.trace:5:", "not before the end");
  check_parse_error(head + "at 0 fail 1\n", "t.trace:5:", "at 0 only");
  check_parse_error(head + "at 10 fail 1\n", "t.trace:5:", "not a duration");
  check_parse_error(head + "# a comment\n\nrestart 20\n", "t.trace:7:", "not a duration");
  check_parse_error(head + "node_start 120\n", "t.trace:5:", "not a duration");
  check_parse_error(head + "duration 2h\n", "t.trace:5:", "first on line 1");
  check_parse_error(head + "failures rate=0.1\n", "t.trace:5:", "repair=");
  check_parse_error(head + "colour blue\n", "t.trace:5:", "unknown line 'colour'");
  check_parse_error("duration 1h\nnodes_max 4\nthroughput 1:1\npolicy min=3 max=2\n",
                    "t.trace:4:", "--min-replicas");
  check_parse_error("duration 1h\nnodes_max 4\npolicy min=1 max=4 step=x\n",
                    "t.trace:3:", "policy step must be an integer");
  check_parse_error("duration 1h\nnodes_max 4\nthroughput 1:1\n", "t.trace:", "no `policy` line");
}

TEST_CASE("a trace with no changes gives the cost model's steady state under every policy",
          "[sim]") {
  // Periodic checkpoints: 30 min of training, then 30 s saving. 20 whole
  // cycles of 1830 s = 36600 s, so goodput is exactly 1800 / 1830.
  const std::string trace = kCosts +
                            "duration 36600s\nnodes_max 4\ncheckpoint_every 30m\n"
                            "policy min=4 max=4\n";
  for (const std::string& policy : controller_names()) {
    INFO(policy);
    const RunResult r = run(trace, policy);
    CHECK(r.goodput() == Approx(1800.0 / 1830));
    CHECK(r.useful == 20 * 1800s);
    CHECK(r.checkpointing == 20 * 30s);
    CHECK(r.down == 0s);
    CHECK(r.scale_events == 0);
    CHECK(r.restarts == 0);
    CHECK(r.time_at_size.at(4) == 36600s);
    // The ideal runs at 4 nodes without checkpoints: 7600 tokens/s.
    CHECK(r.token_efficiency() == Approx(1800.0 / 1830));
    CHECK_FALSE(r.absorbed_idle_fraction());
  }
}

TEST_CASE("one scale-up at a known time absorbs what stabilisation and the restart leave",
          "[sim]") {
  // 4 nodes x 3600 s idle beyond the static allocation of 4.
  const std::string trace = kScaleUpAt1h;

  // elastic: the policy waits scaling_timeout (60 s, no previous event so no
  // stable period), then the scale event costs 30 + 20 + 45 = 95 s: 8 nodes
  // run from 3755 s to 7200 s = 3445 s.
  const RunResult e = run(trace, "elastic");
  CHECK(e.absorbed_idle_fraction().value() == Approx(3445.0 / 3600));
  CHECK(e.time_at_size.at(4) == 3660s);
  CHECK(e.time_at_size.at(8) == 3445s);
  CHECK(e.down == 95s);
  CHECK(e.goodput() == Approx((7200.0 - 95) / 7200));
  CHECK(e.scale_events == 1);
  CHECK(e.scale_ups == 1);
  CHECK(e.thrash_events == 0);
  // 3660 s at 7600 tokens/s and 3445 s at 14000, against the ideal of
  // 3600 s at each size.
  CHECK(e.tokens == Approx(3660.0 * 7600 + 3445.0 * 14000));
  CHECK(e.ideal_tokens == Approx(3600.0 * 7600 + 3600.0 * 14000));

  // Without stabilisation: 95 s from 1h.
  CHECK(run(trace, "elastic-nostab").absorbed_idle_fraction().value() ==
        Approx((3600.0 - 95) / 3600));
  // torchrun restarts at once without saving: 20 + 45 = 65 s, and with no
  // periodic checkpoint the hour before is lost.
  const RunResult t = run(trace, "restart_on_change");
  CHECK(t.absorbed_idle_fraction().value() == Approx((3600.0 - 65) / 3600));
  CHECK(t.lost_work == 3600s);
  CHECK(t.goodput() == Approx((3600.0 - 65) / 7200));
  // Static never grows.
  const RunResult s = run(trace, "static");
  CHECK(s.absorbed_idle_fraction().value() == 0);
  CHECK(s.goodput() == 1);
}

TEST_CASE("a two-minute capacity blip thrashes the job without stabilisation, not with it",
          "[sim]") {
  // 8 nodes from 1h to 1h2m; min_stable 300 s is the thrash window.
  const std::string trace =
      kCosts +
      "duration 2h\nnodes_max 8\n"
      "policy min=4 max=8 step=4 scaling_timeout=60s min_stable=300s max_stable=1h\n"
      "at 0 capacity 4\nat 1h capacity 8\nat 1h2m capacity 4\n";

  // elastic: grows at 1h1m (after 60 s of stabilisation); the round of 8 is
  // still starting (until 1h1m + 95 s) when 4 nodes leave at 1h2m, so it
  // restarts at 4 (65 s, nothing to save): down from 1h1m to 1h3m5s, and 8
  // nodes never ran.
  const RunResult e = run(trace, "elastic");
  CHECK(e.scale_events == 0);
  CHECK(e.thrash_events == 0);
  CHECK(e.restarts == 2);
  CHECK(e.down == 125s);
  CHECK(e.time_at_size.count(8) == 0);

  // elastic-nostab: up at once (running at 8 from 1h + 95 s), down at 1h2m
  // (running at 4 from 1h2m + 95 s): reversed 120 s later.
  const RunResult n = run(trace, "elastic-nostab");
  CHECK(n.scale_events == 2);
  CHECK(n.thrash_events == 1);
  CHECK(n.time_at_size.at(8) == 25s);
  CHECK(n.down == 190s);

  // torchrun: the same reversal, and each restart loses the unsaved work:
  // the first hour, then the 55 s trained at 8.
  const RunResult t = run(trace, "restart_on_change");
  CHECK(t.scale_events == 2);
  CHECK(t.thrash_events == 1);
  CHECK(t.lost_work == 3600s + 55s);
}

TEST_CASE("a crash loses the work since the last checkpoint and a spare replaces the node",
          "[sim]") {
  // 4 members and a spare; checkpoints every 30 min (30 s each). At 3600 s:
  // one cycle of 1830 s, then 1770 s of training not yet saved: lost. The
  // spare fills the round at once: down 20 + 45 = 65 s.
  const std::string trace = kCosts +
                            "duration 2h\nnodes_max 5\ncheckpoint_every 30m\n"
                            "policy min=4 max=4\ninitial 4\nat 1h fail 1\n";
  for (const char* policy : {"static", "elastic"}) {
    INFO(policy);
    const RunResult r = run(trace, policy);
    CHECK(r.lost_work == 1770s);
    CHECK(r.down == 65s);
    CHECK(r.members_lost == 1);
    CHECK(r.restarts == 1);
    CHECK(r.scale_events == 0);
    CHECK(r.time_at_size.at(4) == 7200s - 65s);
  }
}

TEST_CASE(
    "a partial preemption is answered in one decision and training goes on above the "
    "minimum",
    "[sim]") {
  // A job on 4 nodes (min 2); at 1h a critical job takes 1 node until 3h,
  // when the operator scales the job back to 4.
  const std::string trace = kCosts +
                            "duration 4h\nnodes_max 4\npolicy min=2 max=4 scaling_timeout=60s\n"
                            "at 1h preempt 1\nat 3h replace 1\nat 3h scale 4\n";
  const RunResult e = run(trace, "elastic");
  CHECK(e.preempt_requests == 1);
  CHECK(e.preempt_answered_in_one_decision == 1);
  // Down twice for a scale event (95 s each); 3 nodes from 1h + 95 s to 3h.
  CHECK(e.down == 190s);
  CHECK(e.time_at_size.at(3) == 2h - 95s);
  CHECK(e.time_at_size.size() == 3);  // 0, 3 and 4: never below the minimum
  CHECK(e.scale_events == 2);

  // Static cannot give one node back: the critical job takes it by force
  // and the job waits for 4 nodes until 3h.
  const RunResult s = run(trace, "static");
  CHECK(s.preempt_answered_in_one_decision == 0);
  CHECK(s.down == 2h + 65s);
}

TEST_CASE("the same trace and seed give the same JSON; another seed another run", "[sim]") {
  const std::string text = kCosts +
                           "duration 2d\nnodes_max 64\ngpus_per_node 1\ncheckpoint_every 30m\n"
                           "policy min=16 max=64 step=4 scaling_timeout=60s min_stable=300s\n"
                           "failures rate=0.002 repair=4h\nnotices rate=0.02 replace=10m\n";
  const Trace t = parse_trace(text, "t.trace");
  const auto policies = controller_names();
  const std::string first = format_json(t, 7, compare(t, 7, policies));
  CHECK(format_json(t, 7, compare(t, 7, policies)) == first);
  CHECK(format_json(t, 8, compare(t, 8, policies)) != first);
}

TEST_CASE("generated failures come back after the repair time", "[sim]") {
  const Trace t = parse_trace(kCosts +
                                  "duration 7d\nnodes_max 100\npolicy min=1 max=100\n"
                                  "failures rate=0.01 repair=2h\n",
                              "t.trace");
  const auto events = expand(t, 3);
  int failures = 0, returns = 0;
  for (const auto& e : events) {
    if (e.kind == EventKind::kFail) {
      ++failures;
      REQUIRE(e.pick);
    }
    if (e.kind == EventKind::kReplace) ++returns;
  }
  // 100 nodes x 168 h x 0.01 = 168 expected; a seed far off that would mean
  // the rate is wrong (the Poisson standard deviation is 13).
  CHECK(failures > 100);
  CHECK(failures < 240);
  // Every failure returns 2 h later unless that is past the end.
  int late = 0;
  for (const auto& e : events) {
    if (e.kind == EventKind::kFail && e.at + 2h >= t.duration) ++late;
  }
  CHECK(returns == failures - late);
}

namespace {

// The series as (seconds, capacity, world, useful seconds) rows; tokens are
// checked apart.
std::vector<std::vector<double>> rows(const RunResult& r) {
  std::vector<std::vector<double>> out;
  for (const SeriesPoint& p : r.series) {
    out.push_back({std::chrono::duration<double>(p.at).count(), double(p.capacity), double(p.world),
                   std::chrono::duration<double>(p.useful).count()});
  }
  return out;
}

using Rows = std::vector<std::vector<double>>;

}  // namespace

TEST_CASE("the series has one point per change of capacity or world size, with progress", "[sim]") {
  // elastic: 8 nodes at 1h; it stops 60 s later, down 95 s, runs at 8
  // from 3755 s. Nothing is lost, so progress is the time trained.
  const RunResult e = run(kScaleUpAt1h, "elastic");
  CHECK(rows(e) == Rows{{0, 4, 4, 0},
                        {3600, 8, 4, 3600},
                        {3660, 8, 0, 3660},
                        {3755, 8, 8, 3660},
                        {7200, 8, 8, 3660 + 3445}});
  REQUIRE(e.series.size() == 5);
  CHECK(e.series[2].tokens == Approx(3660.0 * 7600));
  CHECK(e.series[4].tokens == Approx(e.tokens));

  // torchrun restarts at once (capacity and world change in one instant:
  // one point) and loses the hour: progress stays 0 until it runs again.
  const RunResult t = run(kScaleUpAt1h, "restart_on_change");
  CHECK(rows(t) == Rows{{0, 4, 4, 0}, {3600, 8, 0, 0}, {3665, 8, 8, 0}, {7200, 8, 8, 3535}});
}

TEST_CASE("after a crash the series stops progress at the last completed checkpoint", "[sim]") {
  // Checkpoints every 30 min (30 s each): the first completes at 1830 s.
  // The member dies at 1h: the 1770 s since are lost; the spare restarts
  // the job 65 s later. From 3665 s to 7200 s: one cycle (1800 s trained)
  // and 1705 s more.
  const std::string trace = kCosts +
                            "duration 2h\nnodes_max 5\ncheckpoint_every 30m\n"
                            "policy min=4 max=4\ninitial 4\nat 1h fail 1\n";
  const RunResult r = run(trace, "elastic");
  CHECK(rows(r) == Rows{{0, 5, 4, 0},
                        {1830, 5, 4, 1800},
                        {3600, 4, 0, 1800},
                        {3665, 4, 4, 1800},
                        {7200, 4, 4, 1800 + 1800 + 1705}});
  CHECK(std::chrono::duration<double>(r.useful).count() == 5305);
}

TEST_CASE("without spare agents a replacement waits for an agent to start on an idle node",
          "[sim]") {
  // 4 members and one idle node; a member dies at 1h. With spares the idle
  // node's agent takes its place at once: down 20 + 45 = 65 s. Without,
  // the policy waits (faulty=300s) while an agent starts on the idle node
  // (node_start, 120 s by default): the round closes at 3720 s and runs
  // from 3785 s, at the same size.
  const std::string trace = kCosts +
                            "duration 2h\nnodes_max 5\n"
                            "policy min=4 max=4 faulty=300s\ninitial 4\nat 1h fail 1\n";
  const RunResult spares = run(trace, "elastic");
  CHECK(spares.down == 65s);
  const RunResult none = run(trace, "elastic-nospares");
  CHECK(none.down == 185s);
  CHECK(none.restarts == 1);
  CHECK(none.scale_events == 0);
  CHECK(rows(none) == Rows{{0, 5, 4, 0}, {3600, 4, 0, 0}, {3785, 4, 4, 0}, {7200, 4, 4, 3415}});
  // The cost is the trace's: `node_start 1m` gets the agent up at 3660 s.
  CHECK(run("node_start 1m\n" + trace, "elastic-nospares").down == 125s);
}

TEST_CASE(
    "without spare agents a start slower than the faulty wait shrinks the job and grows it back",
    "[sim]") {
  // Sizes 2 and 4; a member dies at 1h; the agent on the idle node takes
  // 5 min to start but the policy waits only 120 s: the round closes at 2
  // at 3720 s (running from 3785 s). The agent is up at 3900 s; the policy
  // grows the job after scaling_timeout (60 s; no voluntary event before,
  // so no stable period): stop at 3960 s, 95 s down, at 4 from 4055 s.
  const std::string trace = kCosts +
                            "duration 2h\nnodes_max 5\nnode_start 5m\n"
                            "policy min=2 max=4 step=2 scaling_timeout=60s faulty=120s "
                            "min_stable=300s\ninitial 4\nat 1h fail 1\n";
  const RunResult none = run(trace, "elastic-nospares");
  CHECK(none.time_at_size.at(2) == 175s);
  CHECK(none.time_at_size.at(4) == 3600s + 7200s - 4055s);
  CHECK(none.down == 185s + 95s);
  CHECK(none.restarts == 2);
  CHECK(none.scale_downs == 1);
  CHECK(none.scale_ups == 1);
  // With spares: replaced at once at 4.
  const RunResult spares = run(trace, "elastic");
  CHECK(spares.down == 65s);
  CHECK(spares.time_at_size.count(2) == 0);
}

TEST_CASE("without failures or departures spares change nothing", "[sim]") {
  // The scale-up trace: both variants grow at the same time, because nodes
  // the trace adds come with their agents.
  CHECK(rows(run(kScaleUpAt1h, "elastic-nospares")) == rows(run(kScaleUpAt1h, "elastic")));
}
