// The job config's runPolicy section (cli/run_policy): HyperPod's documented
// examples, the keys elasticrun uses and the ones it notes as ignored, and
// the messages for malformed rules.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "cli/job_config.hpp"
#include "elasticrun/errors.hpp"
#include "health/log_rules.hpp"
#include "temp_dir.hpp"

using namespace elasticrun::cli;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;
using elasticrun::health::FaultKind;
using elasticrun::health::LogRules;
using elasticrun::health::MetricOperator;

namespace {

// The YAML blocks of HyperPod's documentation (notes/hyperpod.md), exactly,
// comments included: the example of "Using the training operator to run
// jobs", then its four "Sample log monitoring configurations". The first is
// indented as it is under `spec:` there.
const std::string kDocumented = R"yaml(  runPolicy:
    jobMaxRetryCount: 50
    restartPolicy:
      numRestartBeforeFullJobRestart: 3
      evalPeriodSeconds: 21600
      maxFullJobRestarts: 1
    cleanPodPolicy: "All"
    logMonitoringConfiguration:
      - name: "JobStart"
        logPattern: ".*Experiment configuration.*" # This is the start of the training script
        expectedStartCutOffInSeconds: 120 # Expected match in the first 2 minutes
      - name: "JobHangingDetection"
        logPattern: ".*\\[Epoch 0 Batch \\d+.*'training_loss_step': (\\d+(\\.\\d+)?).*"
        expectedRecurringFrequencyInSeconds: 300 # If next batch is not printed within 5 minute, consider it hangs. Or if loss is not decimal (e.g. nan) for 2 minutes, mark it hang as well.
        expectedStartCutOffInSeconds: 600 # Allow 10 minutes of job startup time
      - name: "NoS3CheckpointingDetection"
        logPattern: ".*The checkpoint is finalized. All shards is written.*"
        expectedRecurringFrequencyInSeconds: 600 # If next checkpoint s3 upload doesn't happen within 10 mins, mark it hang.
        expectedStartCutOffInSeconds: 1800 # Allow 30 minutes for first checkpoint upload
      - name: "LowThroughputDetection"
        logPattern: ".*\\[Epoch 0 Batch \\d+.*'samples\\/sec': (\\d+(\\.\\d+)?).*"
        metricThreshold: 80 # 80 samples/sec
        operator: "lteq"
        metricEvaluationDataPoints: 25 # if throughput lower than threshold for 25 datapoints, kill the job
)yaml";

const std::string kJobStartAndHang = R"yaml(runPolicy:
    jobMaxRetryCount: 10
    cleanPodPolicy: "None"
    logMonitoringConfiguration:
      - name: "JobStartGracePeriod"
        # Sample log line: [default0]:2025-06-17 05:51:29,300 [INFO] __main__: Train Epoch: 5 [0/60000 (0%)]       loss=0.8470
        logPattern: ".*Train Epoch.*"
        expectedStartCutOffInSeconds: 60
      - name: "JobHangingDetection"
        logPattern: ".*Train Epoch.*"
        expectedRecurringFrequencyInSeconds: 10 # if the next batch is not printed within 10 seconds
)yaml";

const std::string kLossSpike = R"yaml(runPolicy:
  jobMaxRetryCount: 10
  cleanPodPolicy: "None"
  logMonitoringConfiguration:
    - name: "LossSpikeDetection"
      logPattern: ".*training_loss_step (\\d+(?:\\.\\d+)?).*"   # training_loss_step 5.0
      metricThreshold: 2.0
      operator: "gt"
      metricEvaluationDataPoints: 5 # if loss higher than threshold for 5 data points, restart the job
)yaml";

const std::string kTflops = R"yaml(runPolicy:
  jobMaxRetryCount: 10
  cleanPodPolicy: "None"
  logMonitoringConfiguration:
    - name: "TFLOPs"
      logPattern: ".* (.+)TFLOPs.*"    # Training model, speed: X TFLOPs...
      expectedRecurringFrequencyInSeconds: 5
      metricThreshold: 100       # if Tflops is less than 100 for 5 data points, restart the job
      operator: "lt"
      metricEvaluationDataPoints: 5
)yaml";

const std::string kGpuError = R"yaml(runPolicy:
  jobMaxRetryCount: 10
  cleanPodPolicy: "None"
  logMonitoringConfiguration:
    - name: "GPU Error"
      logPattern: ".*RuntimeError.*out of memory.*"
      faultOnMatch: true
)yaml";

const std::vector<std::string> kExamples = {kDocumented, kJobStartAndHang, kLossSpike, kTflops,
                                            kGpuError};

bool has_note(const JobConfig& c, const std::string& part) {
  for (const auto& n : c.notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("every runPolicy example of HyperPod's documentation parses and its rules compile",
          "[cli]") {
  for (size_t i = 0; i < kExamples.size(); ++i) {
    INFO("example " << i);
    const auto c = parse_job_config(kExamples[i], "job.yaml");
    CHECK_FALSE(c.log_rules.empty());
    REQUIRE(c.restart_policy);
    CHECK(c.restart_policy->value.job_max_retry_count);
    CHECK(LogRules::compile(c.log_rules));
    CHECK(has_note(c, "runPolicy.cleanPodPolicy is HyperPod's operator's; elasticrun ignores it"));
  }
}

TEST_CASE("the documented example's restart policy and rules land in the job config", "[cli]") {
  const auto c = parse_job_config(kDocumented, "job.yaml");
  REQUIRE(c.restart_policy);
  const auto& p = c.restart_policy->value;
  CHECK(c.restart_policy->origin == "job.yaml, line 3: runPolicy.restartPolicy");
  CHECK(p.job_max_retry_count == 50);
  CHECK(p.num_restart_before_full_job_restart == 3);
  CHECK(p.eval_period_seconds == 21600);
  CHECK(p.max_full_job_restarts == 1);

  REQUIRE(c.log_rules.size() == 4);
  const auto& start = c.log_rules[0];
  CHECK(start.name == "JobStart");
  CHECK(start.log_pattern == ".*Experiment configuration.*");
  CHECK(start.expected_start_cutoff == 120);
  CHECK_FALSE(start.expected_recurring_frequency);
  CHECK_FALSE(start.metric_threshold);
  CHECK_FALSE(start.fault_on_match);
  CHECK(start.origin == "job.yaml, line 9: runPolicy.logMonitoringConfiguration[0]");
  const auto& hang = c.log_rules[1];
  // YAML's double quotes take one level of backslashes.
  CHECK(hang.log_pattern == R"(.*\[Epoch 0 Batch \d+.*'training_loss_step': (\d+(\.\d+)?).*)");
  CHECK(hang.expected_recurring_frequency == 300);
  CHECK(hang.expected_start_cutoff == 600);
  CHECK(hang.origin == "job.yaml, line 12: runPolicy.logMonitoringConfiguration[1]");
  CHECK(c.log_rules[2].expected_start_cutoff == 1800);
  const auto& slow = c.log_rules[3];
  CHECK(slow.name == "LowThroughputDetection");
  CHECK(slow.metric_threshold == 80);
  CHECK(slow.op == MetricOperator::kLteq);
  CHECK(slow.metric_evaluation_data_points == 25);
  CHECK_FALSE(slow.stop_pattern);
  REQUIRE(c.notes.size() == 1);
  CHECK(c.notes[0] ==
        "job.yaml, line 7: runPolicy.cleanPodPolicy is HyperPod's operator's; elasticrun ignores "
        "it");
}

TEST_CASE("the documented rules judge a realistic log as documented", "[cli]") {
  const auto c = parse_job_config(kDocumented, "job.yaml");
  const auto t0 = elasticrun::health::Clock::time_point{} + 24h;
  LogRules rules(c.log_rules, t0);
  CHECK_FALSE(rules.on_line(t0 + 30s, "2026-12-01 [INFO] Experiment configuration: {...}"));
  const std::string batch =
      "[Epoch 0 Batch 12/500] {'training_loss_step': 2.3412, 'samples/sec': 95.3}";
  CHECK_FALSE(rules.on_line(t0 + 60s, batch));
  CHECK_FALSE(rules.check(t0 + 360s));  // 300 s after the batch
  // The checkpoint rule's first match is due at 1800 s; the batches stop first.
  const auto f = rules.check(t0 + 361s);
  REQUIRE(f);
  CHECK(f->reason() == "LogHang_JobHangingDetection");

  // 25 slow batches in a row: LogSlow.
  LogRules slow(c.log_rules, t0);
  CHECK_FALSE(slow.on_line(t0 + 1s, "Experiment configuration"));
  std::optional<elasticrun::health::Fault> verdict;
  for (int i = 0; i < 25 && !verdict; ++i) {
    verdict = slow.on_line(t0 + 2s + i * 1s, "[Epoch 0 Batch " + std::to_string(i) +
                                                 "/500] {'training_loss_step': 2.1, "
                                                 "'samples/sec': 61.5}");
    if (i < 24) CHECK_FALSE(verdict);
  }
  REQUIRE(verdict);
  CHECK(verdict->kind == FaultKind::kLogSlow);
  CHECK(verdict->reason() == "LogSlow_LowThroughputDetection");
}

TEST_CASE("jobMaxRetryCount alone is a restart policy without a window", "[cli]") {
  const auto c = parse_job_config(kGpuError, "job.yaml");
  REQUIRE(c.restart_policy);
  CHECK(c.restart_policy->origin == "job.yaml, line 2: runPolicy.jobMaxRetryCount");
  CHECK(c.restart_policy->value.job_max_retry_count == 10);
  CHECK_FALSE(c.restart_policy->value.eval_period_seconds);
  CHECK_FALSE(c.restart_policy->value.num_restart_before_full_job_restart);
  CHECK_FALSE(c.restart_policy->value.max_full_job_restarts);
  REQUIRE(c.log_rules.size() == 1);
  CHECK(c.log_rules[0].fault_on_match);
  // A restartPolicy alone has no jobMaxRetryCount.
  const auto r =
      parse_job_config("runPolicy:\n  restartPolicy: {evalPeriodSeconds: 60}\n", "j.yaml");
  REQUIRE(r.restart_policy);
  CHECK_FALSE(r.restart_policy->value.job_max_retry_count);
  CHECK(r.restart_policy->value.eval_period_seconds == 60);
}

TEST_CASE("HyperPod's operator keys are accepted, checked for their type, and noted as ignored",
          "[cli]") {
  const auto c = parse_job_config(R"(runPolicy:
  cleanPodPolicy: OnlyComplete
  ttlSecondsAfterFinished: -1
  activeDeadlineSeconds: 86400
  faultDeadlineSeconds: 600
  startupDeadlineSeconds: 900
  suspend: false
  workloadMode: Deployment
  restartPolicy:
    evalPeriodSeconds: 3600
    maxNumRepeatOffendersToAvoid: 2
    scaleUpSnoozeTimeInSeconds: 120
)",
                                  "j.yaml");
  const std::vector<std::string> expected = {
      "j.yaml, line 2: runPolicy.cleanPodPolicy",
      "j.yaml, line 3: runPolicy.ttlSecondsAfterFinished",
      "j.yaml, line 4: runPolicy.activeDeadlineSeconds",
      "j.yaml, line 5: runPolicy.faultDeadlineSeconds",
      "j.yaml, line 6: runPolicy.startupDeadlineSeconds",
      "j.yaml, line 7: runPolicy.suspend",
      "j.yaml, line 8: runPolicy.workloadMode",
      "j.yaml, line 11: runPolicy.restartPolicy.maxNumRepeatOffendersToAvoid",
      "j.yaml, line 12: runPolicy.restartPolicy.scaleUpSnoozeTimeInSeconds",
  };
  REQUIRE(c.notes.size() == expected.size());
  for (const auto& origin : expected) {
    INFO(origin);
    CHECK(has_note(c, origin + " is HyperPod's operator's; elasticrun ignores it"));
  }
  REQUIRE(c.restart_policy);
  CHECK(c.restart_policy->value.eval_period_seconds == 3600);
  CHECK_FALSE(c.restart_policy->value.num_restart_before_full_job_restart);
}

TEST_CASE("malformed runPolicy values are refused with the file, the line and the key", "[cli]") {
  const std::string rule = "runPolicy:\n  logMonitoringConfiguration:\n    - name: JobStart\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {rule + "      logPattern: .*start.*\n      faultOnMatches: true\n",
       "j.yaml, line 5: unknown key 'faultOnMatches' in runPolicy.logMonitoringConfiguration[0]; "
       "expected one of name, logPattern,"},
      {"runPolicy:\n  logMonitoringConfiguration:\n    - logPattern: .*start.*\n"
       "      expectedStartCutOffInSeconds: 60\n",
       "j.yaml, line 3: runPolicy.logMonitoringConfiguration[0]: no name"},
      {rule + "      expectedStartCutOffInSeconds: 60\n",
       "j.yaml, line 3: runPolicy.logMonitoringConfiguration[0]: no logPattern"},
      {rule + "      logPattern: a\n      faultOnMatch: true\n    - name: JobStart\n"
              "      logPattern: b\n      faultOnMatch: true\n",
       "j.yaml, line 6: runPolicy.logMonitoringConfiguration[1].name: 'JobStart' is given twice "
       "(first at j.yaml, line 3: runPolicy.logMonitoringConfiguration[0].name)"},
      {rule + "      logPattern: '.* (\\d+) samples/sec.*'\n      metricThreshold: 80\n"
              "      operator: ge\n",
       "j.yaml, line 6: runPolicy.logMonitoringConfiguration[0].operator: expected one of gt, "
       "gteq, lt, lteq, eq, got 'ge'"},
      {rule + "      logPattern: '.* (\\d+) samples/sec.*'\n      metricThreshold: 80\n",
       "j.yaml, line 5: runPolicy.logMonitoringConfiguration[0].metricThreshold: needs an "
       "operator"},
      {rule + "      logPattern: '.* (\\d+) samples/sec.*'\n      operator: lt\n",
       "j.yaml, line 5: runPolicy.logMonitoringConfiguration[0].operator: needs a metricThreshold"},
      {rule + "      logPattern: a\n      metricThreshold: 1\n      operator: gt\n"
              "      metricEvaluationDataPoints: 0\n",
       "line 7: runPolicy.logMonitoringConfiguration[0].metricEvaluationDataPoints: must be at "
       "least 1"},
      {rule + "      logPattern: a\n      expectedStartCutOffInSeconds: 0\n",
       "line 5: runPolicy.logMonitoringConfiguration[0].expectedStartCutOffInSeconds: must be "
       "more than 0 seconds"},
      {rule + "      logPattern: a\n      expectedRecurringFrequencyInSeconds: -300\n",
       "line 5: runPolicy.logMonitoringConfiguration[0].expectedRecurringFrequencyInSeconds: must "
       "be more than 0 seconds"},
      {rule + "      logPattern: a\n      expectedRecurringFrequencyInSeconds: \"300\"\n",
       "line 5: runPolicy.logMonitoringConfiguration[0].expectedRecurringFrequencyInSeconds: "
       "expected a number, got the string '300'"},
      {rule + "      logPattern: a\n      faultOnMatch: yes\n",
       "line 5: runPolicy.logMonitoringConfiguration[0].faultOnMatch: expected true or false, got "
       "'yes'"},
      {rule + "      logPattern: a\n      faultOnMatch: \"true\"\n",
       "expected true or false, got the string 'true'"},
      {rule + "      logPattern: [a]\n",
       "line 4: runPolicy.logMonitoringConfiguration[0].logPattern: expected a string, got a list"},
      {rule + "      logPattern: \"\"\n",
       "line 4: runPolicy.logMonitoringConfiguration[0].logPattern: must not be empty"},
      {rule + "      logPattern: a\n      stopPattern:\n      faultOnMatch: true\n",
       "line 5: runPolicy.logMonitoringConfiguration[0].stopPattern: expected a string, got "
       "nothing"},
      {rule + "      name: JobStart2\n      logPattern: a\n",
       "line 4: runPolicy.logMonitoringConfiguration[0].name is given twice"},
      {"runPolicy:\n  logMonitoringConfiguration:\n    name: JobStart\n",
       "line 3: runPolicy.logMonitoringConfiguration: expected a list of rules, got a mapping"},
      {"runPolicy:\n  logMonitoringConfiguration:\n    - JobStart\n",
       "line 3: runPolicy.logMonitoringConfiguration[0]: expected a mapping (name, logPattern, "
       "...), got 'JobStart'"},
      {"runPolicy:\n  jobMaxRetryCount: -1\n",
       "line 2: runPolicy.jobMaxRetryCount: must not be "
       "negative"},
      {"runPolicy:\n  restartPolicy:\n    numRestartBeforeFullJobRestart: 3\n",
       "j.yaml, line 3: runPolicy.restartPolicy: no evalPeriodSeconds"},
      {"runPolicy:\n  restartPolicy: {}\n",
       "line 2: runPolicy.restartPolicy: no "
       "evalPeriodSeconds"},
      {"runPolicy:\n  restartPolicy:\n    evalPeriodSeconds: 60\n"
       "    numRestartBeforeFullJobRestart: 1.5\n",
       "line 4: runPolicy.restartPolicy.numRestartBeforeFullJobRestart: expected an integer"},
      {"runPolicy:\n  restartPolicy:\n    evalPeriodSeconds: 0\n",
       "line 3: runPolicy.restartPolicy.evalPeriodSeconds: must be more than 0 seconds"},
      {"runPolicy:\n  restartPolicy:\n    evalPeriodSecond: 60\n",
       "line 3: unknown key 'evalPeriodSecond' in runPolicy.restartPolicy; expected one of "
       "numRestartBeforeFullJobRestart, evalPeriodSeconds,"},
      {"runPolicy:\n  restartPolicies: {}\n",
       "line 2: unknown key 'restartPolicies' in runPolicy; expected one of jobMaxRetryCount,"},
      {"runPolicy:\n  suspend: 1\n", "line 2: runPolicy.suspend: expected true or false, got '1'"},
      {"runPolicy:\n  ttlSecondsAfterFinished: forever\n",
       "line 2: runPolicy.ttlSecondsAfterFinished: expected an integer, got 'forever'"},
      {"runPolicy: [jobMaxRetryCount]\n", "line 1: runPolicy: expected a mapping, got a list"},
  };
  for (const auto& [yaml, message] : cases) {
    INFO(yaml);
    REQUIRE_THROWS_AS(parse_job_config(yaml, "j.yaml"), ConfigError);
    REQUIRE_THROWS_WITH(parse_job_config(yaml, "j.yaml"), Contains(message));
  }
}

TEST_CASE("a pattern RE2 refuses is refused by the compile step, naming the rule's line", "[cli]") {
  const auto c = parse_job_config(R"(runPolicy:
  logMonitoringConfiguration:
    - name: JobStart
      logPattern: ".*Experiment configuration.*"
      expectedStartCutOffInSeconds: 120
    - name: NanLoss
      logPattern: ".*loss(?=: nan).*"
      faultOnMatch: true
)",
                                  "j.yaml");
  REQUIRE_THROWS_AS(LogRules::compile(c.log_rules), ConfigError);
  REQUIRE_THROWS_WITH(LogRules::compile(c.log_rules),
                      Contains("j.yaml, line 6: runPolicy.logMonitoringConfiguration[1].logPattern "
                               "'.*loss(?=: nan).*': RE2 refuses it: invalid perl operator"));
}

TEST_CASE("values HyperPod's job spec takes only as integers are used as written, with a note",
          "[cli]") {
  const auto c = parse_job_config(R"(runPolicy:
  restartPolicy: {evalPeriodSeconds: 90.5}
  logMonitoringConfiguration:
    - name: LossSpike
      logPattern: ".*loss=(\\d+(?:\\.\\d+)?).*"
      metricThreshold: 2.5
      operator: gt
      expectedRecurringFrequencyInSeconds: 0.5
)",
                                  "j.yaml");
  CHECK(c.restart_policy->value.eval_period_seconds == 90.5);
  CHECK(c.log_rules[0].metric_threshold == 2.5);
  CHECK(c.log_rules[0].expected_recurring_frequency == 0.5);
  REQUIRE(c.notes.size() == 3);
  CHECK(c.notes[0] ==
        "j.yaml, line 2: runPolicy.restartPolicy.evalPeriodSeconds '90.5': HyperPod's job spec "
        "takes only an integer here; elasticrun uses 90.5");
  CHECK_THAT(c.notes[1], Contains("line 6: runPolicy.logMonitoringConfiguration[0].metricThreshold "
                                  "'2.5'"));
  CHECK_THAT(c.notes[2], Contains("line 8: runPolicy.logMonitoringConfiguration[0]."
                                  "expectedRecurringFrequencyInSeconds '0.5'"));
}

TEST_CASE("a rule that judges nothing and data points without a threshold are noted", "[cli]") {
  const auto c = parse_job_config(R"(runPolicy:
  logMonitoringConfiguration:
    - name: Watched
      logPattern: ".*step.*"
      metricEvaluationDataPoints: 5
      stopPattern: ".*done.*"
)",
                                  "j.yaml");
  REQUIRE(c.log_rules.size() == 1);
  CHECK(c.log_rules[0].stop_pattern == ".*done.*");
  CHECK(c.log_rules[0].metric_evaluation_data_points == 5);
  REQUIRE(c.notes.size() == 2);
  CHECK(c.notes[0] ==
        "j.yaml, line 5: runPolicy.logMonitoringConfiguration[0].metricEvaluationDataPoints: has "
        "no effect without metricThreshold and operator");
  CHECK_THAT(c.notes[1], Contains("line 3: runPolicy.logMonitoringConfiguration[0] ('Watched') "
                                  "judges nothing"));
}

TEST_CASE("an empty runPolicy, or empty sections in it, change nothing", "[cli]") {
  for (const char* yaml : {"runPolicy:\n", "runPolicy: {}\n",
                           "runPolicy:\n  restartPolicy:\n  logMonitoringConfiguration:\n",
                           "runPolicy:\n  logMonitoringConfiguration: []\n"}) {
    INFO(yaml);
    const auto c = parse_job_config(yaml, "j.yaml");
    CHECK_FALSE(c.restart_policy);
    CHECK(c.log_rules.empty());
    CHECK(c.notes.empty());
  }
}

TEST_CASE("a job config file with runPolicy and elasticPolicy names the file in origins", "[cli]") {
  elasticrun::test::TempDir dir;
  const auto path = dir / "job.yaml";
  std::ofstream(path) << "elasticPolicy: {minReplicas: 2, maxReplicas: 4}\n" << kTflops;
  const auto c = load_job_config(path);
  REQUIRE(c.min_replicas);
  CHECK(c.min_replicas->value == 2);
  REQUIRE(c.log_rules.size() == 1);
  CHECK(c.log_rules[0].origin == path + ", line 6: runPolicy.logMonitoringConfiguration[0]");
  CHECK(c.log_rules[0].op == MetricOperator::kLt);
  CHECK(c.log_rules[0].expected_recurring_frequency == 5);
}
