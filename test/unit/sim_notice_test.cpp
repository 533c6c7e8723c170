// Spot interruption notices in the capacity simulator: the notice time
// before the node goes, which a policy that hears notices (elasticrun's)
// uses to leave gracefully and one that does not (torchrun's) trains
// through until it loses the node; the node billed until it goes; and
// notices that hit only the spot nodes of a mixed fleet. Figures are
// computed by hand in the comments.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "sim/controller.hpp"
#include "sim/simulator.hpp"
#include "sim/timeline.hpp"
#include "sim/trace.hpp"
#include "sim_runs.hpp"

using namespace elasticrun::sim;
using elasticrun::sim::test::run;
using namespace std::chrono_literals;

namespace {

// 4 spot nodes at 0.5 an hour, 100 samples/s each; a checkpoint every 30
// min (10 s); a stop costs a 10 s save, 20 s restart and 10 s load. One
// node gets a notice at 1h and goes 2 min later; its replacement arrives
// at 1h10m.
const std::string kOneInterruption =
    "duration 3h\nnodes_max 4\nunit samples\nthroughput 1:100 2:200 3:300 4:400\n"
    "policy min=1 max=4\nprice spot=0.5\n"
    "checkpoint_every 30m\ncheckpoint_save 10s\nrestart 20s\ncheckpoint_load 10s\n"
    "notices rate=0 replace=10m notice=2m\n"
    "at 1h spot_notice 1\nat 1h10m replace 1\n";

}  // namespace

TEST_CASE("one interruption at a known time costs each policy a known loss", "[sim]") {
  // Billed: 4 nodes for 3 h less the 8 minutes from the noticed node's end
  // (1h2m) to its replacement (1h10m): 12 - 8/60 node-hours at 0.5.
  const double billed = 12 - 8.0 / 60;

  // elastic hears the notice at 1h: by then one checkpoint cycle (1,810 s)
  // and 1,790 s of training; it saves (10 s), restarts (20 s), loads (10 s)
  // and runs at 3 from 3,640 s. The replacement waits scaling_timeout (10 s,
  // the agent's default): the job stops at 4,210 s, saves, and runs at 4
  // from 4,250 s to the end: 6,550 s, three cycles and 1,120 s.
  const RunResult e = run(kOneInterruption, "elastic");
  CHECK(e.lost_work == 0s);
  CHECK(e.down == 80s);
  CHECK(e.useful == 3590s + 570s + 6520s);
  CHECK(e.time_at_size.at(3) == 570s);
  CHECK(e.tokens == Approx(3590.0 * 400 + 570.0 * 300 + 6520.0 * 400));
  CHECK(e.spot_node_hours == Approx(billed));
  CHECK(e.cost.value() == Approx(0.5 * billed));
  CHECK(e.cost_per_unit().value() == Approx(0.5 * billed / 4215000));

  // restart_on_change hears nothing: all 4 nodes train until the node goes
  // at 3,720 s. Its last checkpoint completed at 3,620 s, holding 3,600 s;
  // the 100 s after are lost. 30 s later it runs at 3; at 4,200 s the
  // replacement joins and it restarts at once, losing the 450 s trained at
  // 3 (no checkpoint yet), and runs at 4 from 4,230 s: 6,570 s, three
  // cycles and 1,140 s.
  const RunResult t = run(kOneInterruption, "restart_on_change");
  CHECK(t.members_lost == 1);
  CHECK(t.lost_work == 100s + 450s);
  CHECK(t.down == 60s);
  CHECK(t.useful == 3600s + 6540s);
  CHECK(t.tokens == Approx((3600.0 + 6540) * 400));
  CHECK(t.spot_node_hours == Approx(billed));
  CHECK(t.cost_per_unit().value() == Approx(0.5 * billed / 4056000));
}

TEST_CASE("a job that does not hear a notice trains on the noticed node until it goes", "[sim]") {
  const RunResult t = run(kOneInterruption, "restart_on_change");
  // The node stays in the series' capacity, training, until 1h2m.
  bool four_at_1h1m = false;
  for (size_t i = 0; i + 1 < t.series.size(); ++i) {
    const SeriesPoint& p = t.series[i];
    if (p.at <= 61min && t.series[i + 1].at > 61min) {
      four_at_1h1m = p.capacity == 4 && p.world == 4;
    }
  }
  CHECK(four_at_1h1m);
  CHECK(t.time_at_size.at(4) == 3720s + 6570s);
}

TEST_CASE("without a notice time a notice is a departure at once under every policy", "[sim]") {
  std::string trace = kOneInterruption;
  trace.replace(trace.find(" notice=2m"), 10, "");
  // restart_on_change stops at 1h without saving: the 1,790 s since the
  // checkpoint are lost, and the 570 s it trained at 3 from 3,630 s when
  // the replacement joins; the noticed node is billed no longer.
  const RunResult t = run(trace, "restart_on_change");
  CHECK(t.members_lost == 0);
  CHECK(t.lost_work == 1790s + 570s);
  CHECK(t.spot_node_hours == Approx(12 - 10.0 / 60));
  CHECK(run(trace, "elastic").down == 80s);
}

TEST_CASE("notices hit spot nodes only: the on-demand ones are held first and never noticed",
          "[sim]") {
  // 1 on-demand node and 2 spot ones; a notice an hour per spot node, and
  // replacements after 3 h, so the spot nodes are often all gone.
  const std::string trace =
      "duration 2d\nnodes_max 3\nthroughput 1:100 2:200 3:300\npolicy min=1 max=3\n"
      "price on_demand=2 spot=0.5 spot_nodes=2\nnotices rate=1 replace=3h notice=2m\n"
      "at 10h spot_notice 3\n";
  const Trace t = parse_trace(trace, "t.trace");
  int notices = 0;
  int capacity = t.initial_capacity;
  for (const TimelineEvent& e : expand(t, 5)) {
    capacity = capacity_after(e, capacity, t);
    CHECK(capacity >= 1);
    if (e.kind == EventKind::kSpotNotice) ++notices;
  }
  CHECK(notices > 10);
  for (const char* policy : {"elastic", "restart_on_change"}) {
    INFO(policy);
    const RunResult r = run(trace, policy, 5);
    // The on-demand node is billed all the time; the job never stops
    // training for lack of nodes.
    CHECK(r.on_demand_node_hours == Approx(48));
    CHECK(r.spot_node_hours < 2 * 48);
    CHECK(r.time_at_size.count(1) == 1);
    for (const SeriesPoint& p : r.series) CHECK(p.capacity >= 1);
  }
}

TEST_CASE(
    "a job that does not hear notices loses every member on the noticed nodes when they go, "
    "those a restart put there since included",
    "[sim]") {
  // 1 on-demand node and 3 spot ones; the job runs at max 3, one spot node
  // idle. At 10m all 3 spot nodes get a notice: 2 of them hold members. At
  // 11m the on-demand node fails and torchrun restarts at once, at 3, on
  // the 3 noticed nodes. At 12m they go with all 3 members; the job waits
  // for nodes until 4 arrive at 30m.
  const std::string trace =
      "duration 1h\nnodes_max 4\nthroughput 1:100 2:200 3:300\npolicy min=1 max=3\n"
      "price on_demand=2 spot=0.5 spot_nodes=3\nrestart 20s\n"
      "notices rate=0 replace=1h notice=2m\n"
      "at 10m spot_notice 3\nat 11m fail 1\nat 30m replace 4\n";
  const RunResult t = run(trace, "restart_on_change");
  CHECK(t.members_lost == 1 + 3);
  // Restarting 11m-11m20s, then waiting and restarting 12m-30m20s.
  CHECK(t.down == 20s + 18min + 20s);
  CHECK(t.time_at_size.at(3) == 11min + 40s + 29min + 40s);
  // Without periodic checkpoints each crash loses everything before it.
  CHECK(t.lost_work == 11min + 40s);
  CHECK(t.useful == 29min + 40s);
  // On demand until 11m and from 30m; spot: 3 nodes until 10m, the 3
  // noticed ones until 12m, 3 from 30m.
  CHECK(t.on_demand_node_hours == Approx(41.0 / 60));
  CHECK(t.spot_node_hours == Approx((30 + 6 + 90) / 60.0));
}

TEST_CASE("notices and failures on a cluster with idle nodes keep every policy's books straight",
          "[sim]") {
  // More nodes than the job uses, notices and failures at high rates: the
  // rounds close on noticed nodes that were idle at the notice.
  for (const char* shape :
       {"nodes_max 6\npolicy min=1 max=4\n", "nodes_max 3\npolicy min=1 max=2\n"}) {
    const std::string trace = std::string("duration 1d\n") + shape +
                              "throughput 1:100 2:200 3:300 4:400\ncheckpoint_every 10m\n"
                              "checkpoint_save 10s\nrestart 20s\n"
                              "notices rate=4 replace=3m notice=2m\nfailures rate=0.5 repair=5m\n";
    for (uint64_t seed = 0; seed < 8; ++seed) {
      for (const std::string& policy : controller_names()) {
        INFO(shape << policy << " seed " << seed);
        const RunResult r = run(trace, policy, seed);
        Millis at_sizes{0};
        for (const auto& [size, time] : r.time_at_size) at_sizes += time;
        CHECK(at_sizes == 24h);
        CHECK(r.useful + r.lost_work + r.checkpointing <= 24h - r.down);
        for (const SeriesPoint& p : r.series) CHECK(p.world <= p.capacity);
      }
    }
  }
}
