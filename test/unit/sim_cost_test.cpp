// The capacity simulator's cost per useful sample: prices per node-hour by
// pool, the node-hours billed, the trace's work and the time to train it,
// each policy's own recovery costs, and the trace lines that state them.
// Figures are computed by hand in the comments.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/controller.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "sim/stretch.hpp"
#include "sim/timeline.hpp"
#include "sim/trace.hpp"
#include "sim_runs.hpp"

using namespace elasticrun::sim;
using elasticrun::sim::test::check_parse_error;
using elasticrun::sim::test::run;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// One four-GPU node on demand at 5.672 per hour, 1,000 samples/s.
const std::string kOnDemandNode =
    "duration 2h\nnodes_max 1\ngpus_per_node 4\nunit samples\n"
    "throughput 1:1000\npolicy min=1 max=1\nprice on_demand=5.672\n";

}  // namespace

TEST_CASE("without interruptions the cost is the price times the time to train", "[sim]") {
  // 3,600,000 samples at 1,000/s: one hour, at 5.672 an hour.
  for (const std::string& policy : controller_names()) {
    INFO(policy);
    const RunResult r = run(kOnDemandNode + "work 3600000\n", policy);
    REQUIRE(r.time_to_train);
    CHECK(*r.time_to_train == 1h);
    CHECK(r.duration == 1h);  // the run ends with the work, not with the trace
    CHECK(r.on_demand_node_hours == Approx(1));
    CHECK(r.spot_node_hours == 0);
    CHECK(r.cost.value() == Approx(5.672));
    CHECK(r.tokens == Approx(3600000));
    CHECK(r.cost_per_unit().value() == Approx(5.672 / 3600000));
    CHECK(r.goodput() == 1);
  }
}

TEST_CASE("periodic checkpoints lengthen the time to train by the saves before the last one",
          "[sim]") {
  // 3,600 s of training in 30 min pieces: train, save 30 s, train. The save
  // that would follow the second piece is not paid: the work is done.
  const std::string trace =
      kOnDemandNode + "work 3600000\ncheckpoint_every 30m\ncheckpoint_save 30s\n";
  const RunResult r = run(trace, "elastic");
  CHECK(*r.time_to_train == 3630s);
  CHECK(r.checkpointing == 30s);
  CHECK(r.cost.value() == Approx(5.672 * 3630 / 3600));
  CHECK(length_to_train(parse_trace(trace, "t.trace"), 3600s) == 3630s);
  CHECK(length_to_train(parse_trace(trace, "t.trace"), 3601s) == 3661s);
}

TEST_CASE("work not done by the end of the trace leaves no time to train and costs the whole trace",
          "[sim]") {
  const RunResult r = run(kOnDemandNode + "work 1e12\n", "static");
  CHECK_FALSE(r.time_to_train);
  CHECK(r.duration == 2h);
  CHECK(r.cost.value() == Approx(2 * 5.672));
  CHECK(r.cost_per_unit().value() == Approx(2 * 5.672 / 7200000));
}

TEST_CASE("idle nodes are billed: a rented node costs whether it trains or not", "[sim]") {
  // 4 nodes, the job runs on 2 (max=2), no work: 2 h of 4 nodes at 1.5.
  const RunResult r =
      run("duration 2h\nnodes_max 4\nthroughput 1:100 2:200\npolicy min=1 max=2\n"
          "price spot=1.5\n",
          "elastic");
  CHECK(r.spot_node_hours == Approx(8));
  CHECK(r.cost.value() == Approx(12));
  CHECK(r.cost_per_unit().value() == Approx(12.0 / (200 * 7200)));
  CHECK_FALSE(r.time_to_train);
}

TEST_CASE("a mixed fleet bills each pool at its price", "[sim]") {
  // 1 node on demand at 2, 2 spot nodes at 0.5, for 2 h.
  const RunResult r =
      run("duration 2h\nnodes_max 3\nthroughput 1:100\npolicy min=1 max=3\n"
          "price on_demand=2 spot=0.5 spot_nodes=2\n",
          "elastic");
  CHECK(r.on_demand_node_hours == Approx(2));
  CHECK(r.spot_node_hours == Approx(4));
  CHECK(r.cost.value() == Approx(2 * 2 + 4 * 0.5));
}

TEST_CASE("without a price line nothing has a cost and the table has no cost columns", "[sim]") {
  const std::string text = "duration 1h\nnodes_max 1\nthroughput 1:100\npolicy min=1 max=1\n";
  const Trace t = parse_trace(text, "t.trace");
  const auto runs = compare(t, 0, {"elastic"});
  CHECK_FALSE(runs[0].cost);
  CHECK_FALSE(runs[0].cost_per_unit());
  const std::string table = format_table(t, 0, runs);
  CHECK_THAT(table, !Contains("cost"));
  CHECK_THAT(table, !Contains("train"));
  CHECK_THAT(format_json(t, 0, runs), Contains("\"cost_per_unit\": null"));
}

TEST_CASE("the table and the JSON give time to train, cost and cost per million units", "[sim]") {
  const Trace t = parse_trace(kOnDemandNode + "work 3600000\n", "t.trace");
  const auto runs = compare(t, 0, {"elastic"});
  const std::string table = format_table(t, 0, runs);
  CHECK_THAT(table, Contains("work 3600000 samples; per node-hour: on demand 5.672 (1 node)"));
  CHECK_THAT(table, Contains("samples"));
  CHECK_THAT(table, Contains("cost/1M samples"));
  CHECK_THAT(table, Contains("1h"));
  CHECK_THAT(table, Contains("5.67"));
  CHECK_THAT(table, Contains("1.576"));  // 5.672 / 3.6 per million
  const auto json = nlohmann::json::parse(format_json(t, 0, runs));
  CHECK(json["policies"]["elastic"]["time_to_train_s"] == 3600.0);
  CHECK(json["unit"] == "samples");
  CHECK(json["prices"]["on_demand_nodes"] == 1);
  CHECK(json["prices"]["spot"].is_null());
  // What scripts read instead of the trace's text (bench/spot_breakeven.py).
  CHECK(json["throughput"] == nlohmann::json{{"1", 1000.0}});
  CHECK(json["checkpoint_every_s"].is_null());
}

TEST_CASE("each policy pays the recovery costs its costs line gives it", "[sim]") {
  // 4 nodes until 1h, 8 after. The trace's costs: a scale event 30 + 20 +
  // 45 = 95 s; elastic's own line: 1 s of restart, no save, no load.
  const std::string trace =
      "checkpoint_save 30s\ncheckpoint_load 45s\nrestart 20s\n"
      "throughput 1:2000 2:3900 4:7600 8:14000\n"
      "duration 2h\nnodes_max 8\n"
      "policy min=4 max=8 step=4 scaling_timeout=60s faulty=120s min_stable=300s max_stable=1h\n"
      "costs elastic,static restart=1s checkpoint_load=0s stop_save=0s\n"
      "at 0 capacity 4\nat 1h capacity 8\n";
  CHECK(run(trace, "elastic").down == 1s);
  CHECK(run(trace, "elastic-nostab").down == 95s);
  // torchrun: restart + load, nothing saved.
  CHECK(run(trace, "restart_on_change").down == 65s);
  const Trace t = parse_trace(trace, "t.trace");
  CHECK(t.recovery("static").restart == 1s);
  CHECK(t.recovery("restart_on_change").restart == 20s);
  CHECK(t.recovery("elastic-nostab").stop_save == 30s);
  const auto json =
      nlohmann::json::parse(format_json(t, 0, compare(t, 0, {"elastic", "elastic-nostab"})));
  CHECK(json["policies"]["elastic"]["recovery"] ==
        nlohmann::json{{"restart_s", 1.0}, {"checkpoint_load_s", 0.0}, {"stop_save_s", 0.0}});
  CHECK(json["policies"]["elastic-nostab"]["recovery"] ==
        nlohmann::json{{"restart_s", 20.0}, {"checkpoint_load_s", 45.0}, {"stop_save_s", 30.0}});
}

TEST_CASE("price, work, unit and costs lines that are wrong name their line", "[sim]") {
  const std::string head = "duration 1h\nnodes_max 4\nthroughput 1:1\npolicy min=1 max=4\n";
  check_parse_error(head + "price spot=cheap\n", "t.trace:5:", "price spot must be a number");
  check_parse_error(head + "price\n", "t.trace:5:", "price needs values");
  check_parse_error(head + "price dollars=1\n", "t.trace:5:", "unknown key 'dollars'");
  check_parse_error(head + "price spot=-1\n", "t.trace:5:", "must be a number >= 0");
  check_parse_error(head + "price spot_nodes=2\n", "t.trace:5:", "on_demand=<per node-hour>");
  check_parse_error(head + "price on_demand=1 spot=0.3\n", "t.trace:5:", "spot_nodes=K");
  check_parse_error(head + "price spot=0.3 spot_nodes=2\n", "t.trace:5:", "both prices");
  check_parse_error(head + "price on_demand=1 spot=0.3 spot_nodes=9\n",
                    "t.trace:5:", "spot_nodes 9 is above nodes_max 4");
  check_parse_error(head + "price spot=1\nprice spot=2\n", "t.trace:6:", "first on line 5");
  check_parse_error(head + "price on_demand=1\nnotices rate=0.1 replace=5m\n",
                    "t.trace:6:", "makes no node spot");
  check_parse_error(head + "price on_demand=1\nat 10m spot_notice 1\n",
                    "t.trace:6:", "makes no node spot");
  check_parse_error(head + "work 0\n", "t.trace:5:", "work must be above 0");
  check_parse_error(head + "work lots\n", "t.trace:5:", "work must be a number");
  check_parse_error(head + "unit samples/s\n", "t.trace:5:", "unit must be a word");
  check_parse_error(head + "costs torchrun restart=16s\n",
                    "t.trace:5:", "unknown policy 'torchrun'");
  check_parse_error(head + "costs elastic\n", "t.trace:5:", "costs needs restart=");
  check_parse_error(head + "costs elastic restart=16\n", "t.trace:5:", "not a duration");
  check_parse_error(head + "costs elastic restart=1s\ncosts static,elastic stop_save=0s\n",
                    "t.trace:6:", "elastic given twice (first on line 5)");
}
