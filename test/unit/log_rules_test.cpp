// HyperPod's log monitoring rules (health/log_rules): the rules of HyperPod's
// documentation with their times scaled down (a 300 s frequency becomes
// 3 s), fed time points, never a clock.
#include "health/log_rules.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"

using namespace elasticrun::health;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + 24h;

LogRuleSpec rule(std::string name, std::string pattern) {
  LogRuleSpec r;
  r.origin = "job.yaml, line 7: runPolicy.logMonitoringConfiguration[0]";
  r.name = std::move(name);
  r.log_pattern = std::move(pattern);
  return r;
}

LogRuleSpec job_start() {  // HyperPod's JobStart, 120 s -> 2 s
  LogRuleSpec r = rule("JobStart", ".*Experiment configuration.*");
  r.expected_start_cutoff = 2;
  return r;
}

LogRuleSpec hanging() {  // HyperPod's JobHangingDetection, 300 s / 600 s -> 3 s / 6 s
  LogRuleSpec r = rule("JobHangingDetection",
                       R"(.*\[Epoch 0 Batch \d+.*'training_loss_step': (\d+(\.\d+)?).*)");
  r.expected_recurring_frequency = 3;
  r.expected_start_cutoff = 6;
  return r;
}

LogRuleSpec low_throughput(int points = 3) {  // HyperPod's LowThroughputDetection, 25 points -> 3
  LogRuleSpec r =
      rule("LowThroughputDetection", R"(.*\[Epoch 0 Batch \d+.*'samples\/sec': (\d+(\.\d+)?).*)");
  r.metric_threshold = 80;
  r.op = MetricOperator::kLteq;
  r.metric_evaluation_data_points = points;
  return r;
}

LogRuleSpec gpu_error() {  // HyperPod's "GPU Error"
  LogRuleSpec r = rule("GPU Error", ".*RuntimeError.*out of memory.*");
  r.fault_on_match = true;
  return r;
}

// A line as the documented rules expect it.
std::string batch(int n, double loss, double samples_per_sec) {
  return "[Epoch 0 Batch " + std::to_string(n) +
         "/500] {'training_loss_step': " + std::to_string(loss) +
         ", 'samples/sec': " + std::to_string(samples_per_sec) + ", 'lr': 0.0003}";
}

}  // namespace

TEST_CASE("a faultOnMatch rule faults at the first matching line, naming the rule and the line",
          "[health]") {
  LogRules rules({gpu_error()}, kT0);
  CHECK(rules.size() == 1);
  CHECK_FALSE(rules.on_line(kT0 + 1s, batch(1, 2.5, 95)));
  CHECK_FALSE(rules.check(kT0 + 60s));
  const auto f = rules.on_line(
      kT0 + 61s, "[rank0]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB");
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kLogFault);
  CHECK(f->monitor == "GPU Error");
  CHECK(f->reason() == "LogFault_GPU Error");
  CHECK(f->local_rank == -1);
  CHECK_THAT(f->message, Contains("rule 'GPU Error'") &&
                             Contains("'.*RuntimeError.*out of memory.*'") &&
                             Contains("faultOnMatch") &&
                             Contains("'[rank0]: RuntimeError: CUDA out of memory."));
  // One fault per attempt.
  CHECK_FALSE(rules.on_line(kT0 + 62s, "RuntimeError: CUDA out of memory"));
  CHECK_FALSE(rules.check(kT0 + 63s));
}

TEST_CASE("a pattern matches at the start of the line only, as Python's re.match", "[health]") {
  LogRuleSpec r = rule("Epoch", "Train Epoch");
  r.fault_on_match = true;
  LogRules rules({r}, kT0);
  CHECK_FALSE(rules.on_line(kT0, "[default0]:2025-06-17 05:51:29,300 [INFO] Train Epoch: 5"));
  CHECK_FALSE(rules.on_line(kT0, ""));
  CHECK(rules.on_line(kT0, "Train Epoch: 5 [0/60000 (0%)]   loss=0.8470"));
  // Not anchored at the end: re.match needs only a prefix.
  LogRules anchored_start({r}, kT0);
  CHECK(anchored_start.on_line(kT0, "Train Epochs"));
}

TEST_CASE("a start cut-off hangs when no line matched strictly after it, and never after a match",
          "[health]") {
  {
    LogRules rules({job_start()}, kT0);
    CHECK_FALSE(rules.on_line(kT0 + 1s, "loading the dataset"));
    CHECK_FALSE(rules.check(kT0 + 2s));  // exactly the cut-off is still in time
    const auto f = rules.check(kT0 + 2100ms);
    REQUIRE(f);
    CHECK(f->kind == FaultKind::kLogHang);
    CHECK(f->reason() == "LogHang_JobStart");
    CHECK_THAT(f->message, Contains("no line matched '.*Experiment configuration.*'") &&
                               Contains("in the 2.1 s since the start") &&
                               Contains("more than 2 s (expectedStartCutOffInSeconds)"));
  }
  {
    LogRules rules({job_start()}, kT0);
    CHECK_FALSE(rules.on_line(kT0 + 1900ms, "2025-06-17 [INFO] Experiment configuration: {...}"));
    // A cut-off alone says nothing about later gaps.
    CHECK_FALSE(rules.check(kT0 + 1h));
  }
  {
    // A line that arrives after the cut-off is too late: the rule hangs on it.
    LogRules rules({job_start()}, kT0);
    CHECK(rules.on_line(kT0 + 3s, "still loading"));
  }
}

TEST_CASE("the recurring frequency counts from the previous match and not before the first",
          "[health]") {
  LogRuleSpec r = hanging();
  r.expected_start_cutoff.reset();
  LogRules rules({r}, kT0);
  // No first match yet: a frequency alone cannot hang.
  CHECK_FALSE(rules.check(kT0 + 10min));
  CHECK_FALSE(rules.on_line(kT0 + 10min, batch(0, 3.1, 90)));
  CHECK_FALSE(rules.on_line(kT0 + 10min + 2s, batch(1, 3.0, 91)));
  CHECK_FALSE(rules.on_line(kT0 + 10min + 4s, "a line that is not a batch"));
  CHECK_FALSE(rules.check(kT0 + 10min + 5s));  // exactly 3 s after batch 1
  const auto f = rules.check(kT0 + 10min + 5100ms);
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kLogHang);
  CHECK(f->reason() == "LogHang_JobHangingDetection");
  CHECK_THAT(f->message,
             Contains("for 3.1 s, more than 3 s (expectedRecurringFrequencyInSeconds)") &&
                 Contains("the last match: '[Epoch 0 Batch 1/500]"));
}

TEST_CASE(
    "with a cut-off and a frequency the cut-off covers the first match, the frequency the rest",
    "[health]") {
  {
    LogRules rules({hanging()}, kT0);
    CHECK_FALSE(rules.check(kT0 + 5s));  // 3 s have passed, but the first match has 6
    const auto f = rules.check(kT0 + 6100ms);
    REQUIRE(f);
    CHECK_THAT(f->message, Contains("since the start"));
  }
  {
    LogRules rules({hanging()}, kT0);
    CHECK_FALSE(rules.on_line(kT0 + 5s, batch(0, 3.2, 90)));
    CHECK_FALSE(rules.check(kT0 + 8s));
    const auto f = rules.check(kT0 + 8100ms);
    REQUIRE(f);
    CHECK_THAT(f->message, Contains("for 3.1 s"));
  }
}

TEST_CASE(
    "a metric rule is SLOW after N consecutive violations, and one good value resets the count",
    "[health]") {
  LogRules rules({low_throughput()}, kT0);
  auto t = kT0;
  for (double sps : {70.0, 75.5, 90.0, 70.0, 80.0}) {
    INFO(sps);
    t += 1s;
    CHECK_FALSE(rules.on_line(t, batch(1, 2.0, sps)));
  }
  // 70, 80 and now 60 are three in a row at or below 80.
  const auto f = rules.on_line(t + 1s, batch(6, 2.0, 60.25));
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kLogSlow);
  CHECK(f->reason() == "LogSlow_LowThroughputDetection");
  CHECK_THAT(f->message, Contains("3 consecutive values <= 80 (metricEvaluationDataPoints 3)") &&
                             Contains("the last 60.25") && Contains("'[Epoch 0 Batch 6/500]"));
}

TEST_CASE("lines that do not match leave the metric count as it was", "[health]") {
  LogRules rules({low_throughput()}, kT0);
  CHECK_FALSE(rules.on_line(kT0 + 1s, batch(1, 2.0, 50)));
  CHECK_FALSE(rules.on_line(kT0 + 2s, "saving a checkpoint"));
  CHECK_FALSE(rules.on_line(kT0 + 3s, batch(2, 2.0, 50)));
  CHECK_FALSE(rules.check(kT0 + 4s));
  CHECK(rules.on_line(kT0 + 5s, batch(3, 2.0, 50)));
}

TEST_CASE("each operator compares the metric with the threshold as its name says", "[health]") {
  struct Case {
    MetricOperator op;
    double value;
    bool slow;
  };
  const std::vector<Case> cases = {
      {MetricOperator::kGt, 2.5, true}, {MetricOperator::kGt, 2, false},
      {MetricOperator::kGteq, 2, true}, {MetricOperator::kGteq, 1.5, false},
      {MetricOperator::kLt, 1.5, true}, {MetricOperator::kLt, 2, false},
      {MetricOperator::kLteq, 2, true}, {MetricOperator::kLteq, 2.5, false},
      {MetricOperator::kEq, 2, true},   {MetricOperator::kEq, 2.000001, false},
  };
  for (const auto& c : cases) {
    INFO(static_cast<int>(c.op) << " " << c.value);
    // HyperPod's LossSpikeDetection, one data point.
    LogRuleSpec r = rule("LossSpikeDetection", R"(.*training_loss_step (\d+(?:\.\d+)?).*)");
    r.metric_threshold = 2.0;
    r.op = c.op;
    LogRules rules({r}, kT0);
    const auto f = rules.on_line(kT0, "step 7 training_loss_step " + std::to_string(c.value));
    CHECK(f.has_value() == c.slow);
    if (f) CHECK_THAT(f->message, Contains("the value "));
  }
}

TEST_CASE(
    "the metric is read as Python's float() reads it, and a metric that is not a number "
    "counts for no data point",
    "[health]") {
  // HyperPod's TFLOPs rule, without its frequency: group 1 is whatever
  // precedes "TFLOPs", spaces included.
  LogRuleSpec r = rule("TFLOPs", ".* (.+)TFLOPs.*");
  r.metric_threshold = 100;
  r.op = MetricOperator::kLt;
  r.metric_evaluation_data_points = 2;
  const auto line = [](const std::string& value) {
    return "Training model, speed: " + value + "TFLOPs/s";
  };
  struct Case {
    std::string text;
    enum { kViolates, kGood, kNotANumber } is;
  };
  const std::vector<Case> cases = {
      {"99.5 ", Case::kViolates},     {"\t-3e1 ", Case::kViolates}, {"+.5 ", Case::kViolates},
      {"-inf ", Case::kViolates},     {"5_0 ", Case::kViolates},    {"150.2 ", Case::kGood},
      {"1_000 ", Case::kGood},        {"Infinity ", Case::kGood},   {"nan ", Case::kGood},
      {"n/a ", Case::kNotANumber},    {"0x10 ", Case::kNotANumber}, {"1e ", Case::kNotANumber},
      {"--1 ", Case::kNotANumber},    {"5__0 ", Case::kNotANumber}, {"_5 ", Case::kNotANumber},
      {"nan(1) ", Case::kNotANumber},
  };
  for (const auto& c : cases) {
    INFO("'" << c.text << "'");
    // Between two violations: a violation makes it SLOW, a good value
    // resets the count, no number leaves it at one.
    LogRules between(LogRules::compile({r}), kT0);
    CHECK_FALSE(between.on_line(kT0, line("90 ")));
    const bool slow_now = between.on_line(kT0 + 1s, line(c.text)).has_value();
    const bool slow_after = slow_now || between.on_line(kT0 + 2s, line("90 ")).has_value();
    CHECK(slow_now == (c.is == Case::kViolates));
    CHECK(slow_after == (c.is != Case::kGood));
  }
}

TEST_CASE("a match whose metric is not a number still counts for the frequency", "[health]") {
  LogRuleSpec r = rule("TFLOPs", ".* (.+)TFLOPs.*");  // HyperPod's, 5 s as documented
  r.expected_recurring_frequency = 5;
  r.metric_threshold = 100;
  r.op = MetricOperator::kLt;
  r.metric_evaluation_data_points = 5;
  LogRules rules({r}, kT0);
  CHECK_FALSE(rules.on_line(kT0 + 1s, "speed: 120 TFLOPs"));
  CHECK_FALSE(rules.on_line(kT0 + 5s, "speed: n/a TFLOPs"));
  CHECK_FALSE(rules.check(kT0 + 10s));
  CHECK(rules.check(kT0 + 10100ms));
}

TEST_CASE("a capture group that takes no part in the match is no data point", "[health]") {
  LogRuleSpec r = rule("Loss", R"(.*step \d+(?: loss=(\d+))?.*)");
  r.metric_threshold = 2;
  r.op = MetricOperator::kGt;
  r.metric_evaluation_data_points = 2;
  LogRules rules({r}, kT0);
  CHECK_FALSE(rules.on_line(kT0, "step 1 loss=5"));
  CHECK_FALSE(rules.on_line(kT0 + 1s, "step 2 (loss not logged)"));
  CHECK(rules.on_line(kT0 + 2s, "step 3 loss=6"));
}

TEST_CASE("a stop pattern deactivates the rule for good", "[health]") {
  LogRuleSpec r = hanging();
  r.stop_pattern = ".*Training finished.*";
  LogRules rules({r}, kT0);
  CHECK_FALSE(rules.on_line(kT0 + 1s, batch(0, 3.0, 90)));
  CHECK_FALSE(rules.on_line(kT0 + 2s, "[INFO] Training finished after 1 epoch"));
  CHECK_FALSE(rules.check(kT0 + 1h));
  // A later match does not wake it.
  CHECK_FALSE(rules.on_line(kT0 + 1h, batch(1, 3.0, 90)));
  CHECK_FALSE(rules.check(kT0 + 2h));

  // A stop pattern also ends a start cut-off that has not run out.
  LogRuleSpec start = job_start();
  start.stop_pattern = ".*dry run.*";
  LogRules dry({start}, kT0);
  CHECK_FALSE(dry.on_line(kT0 + 1s, "dry run: nothing to train"));
  CHECK_FALSE(dry.check(kT0 + 1h));
}

TEST_CASE("a line that matches the pattern faults before the stop pattern is looked at",
          "[health]") {
  LogRuleSpec r = gpu_error();
  r.stop_pattern = ".*RuntimeError.*";
  LogRules rules({r}, kT0);
  CHECK(rules.on_line(kT0, "RuntimeError: CUDA out of memory"));
  // After the stop pattern alone, the same rule never faults.
  LogRules stopped({r}, kT0);
  CHECK_FALSE(stopped.on_line(kT0, "RuntimeError: NCCL timeout"));
  CHECK_FALSE(stopped.on_line(kT0 + 1s, "RuntimeError: CUDA out of memory"));
}

TEST_CASE("a matching line that comes late restarts the frequency: only check() sees the gap",
          "[health]") {
  // HyperPod records the match before it looks at the time.
  LogRules late({hanging()}, kT0);
  CHECK_FALSE(late.on_line(kT0, batch(0, 3.0, 90)));
  CHECK_FALSE(late.on_line(kT0 + 4s, batch(1, 3.0, 90)));
  LogRules checked({hanging()}, kT0);
  CHECK_FALSE(checked.on_line(kT0, batch(0, 3.0, 90)));
  CHECK(checked.check(kT0 + 3500ms));
}

TEST_CASE("the most severe verdict wins, and among equals the first rule of the config",
          "[health]") {
  LogRuleSpec slow = low_throughput(1);
  LogRuleSpec start = job_start();
  LogRuleSpec oom = gpu_error();
  // One line, three verdicts: FAULTED first.
  const std::string line = batch(3, 2.0, 10) + " RuntimeError: CUDA out of memory";
  LogRules all({slow, start, oom}, kT0);
  auto f = all.on_line(kT0 + 5s, line);
  REQUIRE(f);
  CHECK(f->reason() == "LogFault_GPU Error");
  // Without the fault, HANGING over SLOW.
  LogRules two({slow, start}, kT0);
  f = two.on_line(kT0 + 5s, line);
  REQUIRE(f);
  CHECK(f->reason() == "LogHang_JobStart");
  // Two rules hanging at once: the first of the config is named.
  LogRuleSpec other = job_start();
  other.name = "JobStart2";
  LogRules equal({other, start}, kT0);
  f = equal.check(kT0 + 5s);
  REQUIRE(f);
  CHECK(f->monitor == "JobStart2");
}

TEST_CASE("compiled rules serve several attempts, each from its own start", "[health]") {
  const auto compiled = LogRules::compile({job_start(), hanging()});
  LogRules first(compiled, kT0);
  CHECK(first.check(kT0 + 2100ms));
  LogRules second(compiled, kT0 + 1min);
  CHECK_FALSE(second.check(kT0 + 1min + 2s));
  CHECK(second.size() == 2);
}

TEST_CASE("only the start of a long matched line is kept, and the message stays one line",
          "[health]") {
  LogRules rules({gpu_error()}, kT0);
  // 64 KiB with the match at the very end, and an escape sequence at the start.
  std::string line = "\x1b[31m" + std::string(64 * 1024, 'x');
  line += " RuntimeError: CUDA out of memory";
  const auto f = rules.on_line(kT0, line);
  REQUIRE(f);
  CHECK_THAT(f->message, Contains("'\\x1b[31mxxx") &&
                             Contains("... (" + std::to_string(line.size()) + " bytes)"));
  CHECK(f->message.size() < 500);
  CHECK(f->message.find('\n') == std::string::npos);
  CHECK(f->message.find('\x1b') == std::string::npos);
}

TEST_CASE(
    "a pattern RE2 refuses is a ConfigError naming the rule's origin, the key and RE2's "
    "reason",
    "[health]") {
  LogRuleSpec look = rule("Lookahead", ".*loss(?=: nan).*");
  REQUIRE_THROWS_AS(LogRules::compile({look}), ConfigError);
  REQUIRE_THROWS_WITH(
      LogRules::compile({look}),
      Contains("job.yaml, line 7: runPolicy.logMonitoringConfiguration[0].logPattern "
               "'.*loss(?=: nan).*': RE2 refuses it: invalid perl operator: (?=") &&
          Contains("no lookaround"));
  LogRuleSpec stop = job_start();
  stop.stop_pattern = "(Training finished";
  REQUIRE_THROWS_WITH(LogRules(std::vector<LogRuleSpec>{stop}, kT0),
                      Contains("logMonitoringConfiguration[0].stopPattern '(Training finished'") &&
                          Contains("missing )"));
}

TEST_CASE("a metric rule whose pattern has no capture group is refused", "[health]") {
  LogRuleSpec r = rule("LowThroughput", ".*samples/sec.*");
  r.metric_threshold = 80;
  r.op = MetricOperator::kLteq;
  REQUIRE_THROWS_WITH(LogRules::compile({r}),
                      Contains("logMonitoringConfiguration[0].logPattern '.*samples/sec.*'") &&
                          Contains("no capture group"));
  // The same pattern without a metric is fine.
  LogRuleSpec plain = rule("Progress", ".*samples/sec.*");
  plain.expected_recurring_frequency = 3;
  CHECK(LogRules::compile({plain}));
}

TEST_CASE("no rules judge nothing", "[health]") {
  LogRules rules(std::vector<LogRuleSpec>{}, kT0);
  CHECK(rules.size() == 0);
  CHECK_FALSE(rules.on_line(kT0, "RuntimeError: CUDA out of memory"));
  CHECK_FALSE(rules.check(kT0 + 24h));
}
