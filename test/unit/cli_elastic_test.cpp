// The elastic group of the command line and the job config file (--config):
// how they combine with --nnodes, precedence, validation, and the messages a
// user gets for a bad value or a bad file.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/flags.hpp"
#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

using namespace elasticrun::cli;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;
using elasticrun::test::TempDir;
using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

LaunchConfig parse(Args args, const Env& env = {}) {
  args.push_back("train.py");
  return parse_launch_args(args, env, 16, 0);
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path;
}

bool has_note(const LaunchConfig& c, const std::string& part) {
  for (const auto& n : c.notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

const std::string kFullConfig = R"(# every key
elasticPolicy:
  minReplicas: 2
  maxReplicas: 8
  replicaDiscreteValues: [8, 2, 4]
  gracefulShutdownTimeoutInSeconds: 120
  scalingTimeoutInSeconds: 5.5
  faultyScaleDownTimeoutInSeconds: 45
  minStablePeriodInSeconds: 15
  maxStablePeriodInSeconds: 900
worldSizeOverrides:
  2: {learningRate: 1e-4, microBatchSize: 32}
  4:
    learningRate: 2.0e-4
    microBatchSize: 16
)";

}  // namespace

TEST_CASE("without elastic flags the replicas come from --nnodes and the rest is the default",
          "[cli]") {
  const auto c = parse({"--nnodes", "2:6", "--rdzv-backend", "c10d"});
  CHECK(c.elastic.min_replicas == 2);
  CHECK(c.elastic.max_replicas == 6);
  CHECK(c.elastic.replica_increment_step == 1);
  CHECK(c.elastic.replica_discrete_values.empty());
  CHECK(c.elastic.graceful_shutdown_timeout == 60);
  CHECK(c.elastic.scaling_timeout == 10);
  CHECK(c.elastic.faulty_scale_down_timeout == 30);
  CHECK(c.elastic.min_stable_period == 30);
  CHECK(c.elastic.max_stable_period == 600);
  CHECK_FALSE(c.elastic.config_file);
  CHECK(c.elastic.world_size_overrides.empty());
  CHECK(c.nnodes_spec == "2:6");
  const auto plain = parse({});
  CHECK(plain.elastic.min_replicas == 1);
  CHECK(plain.elastic.max_replicas == 1);
  CHECK(parse({}, {{"PET_NNODES", "3:5"}}).elastic.max_replicas == 5);
}

TEST_CASE("--min-replicas and --max-replicas set the range without --nnodes", "[cli]") {
  auto c = parse({"--min-replicas", "2", "--max-replicas", "8", "--rdzv-backend", "c10d"});
  CHECK(c.elastic.min_replicas == 2);
  CHECK(c.elastic.max_replicas == 8);
  CHECK(c.nnodes_min == 2);
  CHECK(c.nnodes_max == 8);
  CHECK(c.nnodes_spec == "2:8");
  CHECK(c.notes.empty());
  // A lone minimum is also the maximum, not a range from 4 down to 1.
  c = parse({"--min-replicas", "4", "--rdzv-backend", "c10d"});
  CHECK(c.nnodes_min == 4);
  CHECK(c.nnodes_max == 4);
  c = parse({"--max-replicas", "3", "--rdzv-backend", "c10d"});
  CHECK(c.nnodes_min == 1);
  CHECK(c.nnodes_max == 3);
  // A range makes a job multi-node, so a static one keeps its static rendezvous.
  CHECK(parse({"--max-replicas", "3"}).rdzv_backend == "static");
}

TEST_CASE("replica flags that agree with --nnodes are accepted; a conflict names both flags",
          "[cli]") {
  const auto c = parse({"--nnodes", "2:4", "--min-replicas", "2", "--max_replicas=4"});
  CHECK(c.elastic.min_replicas == 2);
  CHECK(c.elastic.max_replicas == 4);
  REQUIRE_THROWS_WITH(
      parse({"--nnodes", "2:4", "--max-replicas", "8"}),
      Contains("--max-replicas '8'") && Contains("--nnodes '2:4'") && Contains("disagree"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--min-replicas", "1"}),
                      Contains("--min-replicas '1'") && Contains("--nnodes '2'"));
  REQUIRE_THROWS_WITH(parse({"--max-replicas", "8"}, {{"PET_NNODES", "2:4"}}),
                      Contains("--max-replicas '8'") && Contains("PET_NNODES '2:4'"));
}

TEST_CASE("every elastic flag takes both spellings and has no PET_ fallback", "[cli]") {
  TempDir dir;
  const auto file = write(dir, "job.yaml", "elasticPolicy: {scalingTimeoutInSeconds: 3}\n");
  const std::map<Flag, std::string> values = {
      {Flag::kMinReplicas, "3"},
      {Flag::kMaxReplicas, "5"},
      {Flag::kReplicaIncrementStep, "2"},
      {Flag::kReplicaDiscreteValues, "2"},
      {Flag::kGracefulShutdownTimeout, "5"},
      {Flag::kScalingTimeout, "1.5"},
      {Flag::kFaultyScaleDownTimeout, "7"},
      {Flag::kMinStablePeriod, "3"},
      {Flag::kMaxStablePeriod, "900"},
      {Flag::kConfig, file},
      {Flag::kWarmStart, "1"},
      {Flag::kWarmStartImports, "torch,numpy.linalg"},
      {Flag::kEventLog, "events.jsonl"},
      {Flag::kMetricsPort, "9400"},
      {Flag::kSpotNoticeUrl, "http://127.0.0.1:1/notice"},
      {Flag::kSpotNoticeInterval, "0.5"},
      {Flag::kHostDiscoveryScript, "/opt/discover-hosts.sh"},
      {Flag::kHostDiscoveryInterval, "2.5"},
      {Flag::kMemoryTierLimit, "8G"},
      {Flag::kMemoryReplicas, "2"},
      {Flag::kMemoryReplicationRate, "64M"},
      {Flag::kDataCacheLimit, "256M"},
  };
  const std::string baseline = to_json(parse({"--rdzv-id", "x", "--rdzv-backend", "c10d"}));
  size_t seen = 0;
  for (const auto& spec : flag_table()) {
    if (spec.group != Group::kElastic) continue;
    ++seen;
    INFO(spec.long_name);
    CHECK_FALSE(spec.env_fallback);
    const std::string& value = values.at(spec.id);
    // The minimum 2 is there so that every sample size is allowed.
    const Args base = {"--rdzv-id",      "x", "--rdzv-backend", "c10d",
                       "--min-replicas", "2", "--max-replicas", "4"};
    std::vector<std::string> outs;
    for (const auto& name : spec.spellings()) {
      Args a = base;
      if (!spec.takes_value) {  // a switch: given, or not
        a.push_back(name);
        outs.push_back(to_json(parse(a)));
        continue;
      }
      a.insert(a.end(), {name, value});
      outs.push_back(to_json(parse(a)));
      a = base;
      a.push_back(name + "=" + value);
      outs.push_back(to_json(parse(a)));
    }
    CHECK(spec.spellings().size() == (spec.dest().find('_') == std::string::npos ? 1u : 2u));
    for (const auto& out : outs) CHECK(out == outs.front());
    CHECK(outs.front() != to_json(parse(base)));
    CHECK(to_json(parse({"--rdzv-id", "x", "--rdzv-backend", "c10d"},
                        {{spec.env_name(), value}})) == baseline);
  }
  CHECK(seen == values.size());
}

TEST_CASE("an increment step and a list of sizes exclude each other", "[cli]") {
  REQUIRE_THROWS_WITH(parse({"--max-replicas", "8", "--replica-increment-step", "2",
                             "--replica-discrete-values", "2,4"}),
                      Contains("--replica-increment-step") &&
                          Contains("--replica-discrete-values") && Contains("exclude each other"));
  TempDir dir;
  const auto both = write(dir, "both.yaml",
                          "elasticPolicy:\n  maxReplicas: 8\n  replicaIncrementStep: 2\n"
                          "  replicaDiscreteValues: [2, 4]\n");
  REQUIRE_THROWS_WITH(parse({"--config", both}), Contains("replicaIncrementStep") &&
                                                     Contains("replicaDiscreteValues") &&
                                                     Contains("exclude each other"));
  // A flag picks the kind of sizes; the file's other kind gives way.
  const auto c = parse({"--config", both, "--replica-increment-step", "3"});
  CHECK(c.elastic.replica_increment_step == 3);
  CHECK(c.elastic.replica_discrete_values.empty());
  const auto d = parse({"--config", both, "--replica-discrete-values", "4"});
  CHECK(d.elastic.replica_discrete_values == std::vector<int>{4});
}

TEST_CASE("discrete sizes are sorted; zero, repeats and sizes outside the range are refused",
          "[cli]") {
  const auto c = parse({"--max-replicas", "8", "--replica-discrete-values", "8, 2,4"});
  CHECK(c.elastic.replica_discrete_values == std::vector<int>{2, 4, 8});
  REQUIRE_THROWS_WITH(parse({"--max-replicas", "8", "--replica-discrete-values", "0,2"}),
                      Contains("--replica-discrete-values") && Contains("0 is not"));
  REQUIRE_THROWS_WITH(parse({"--max-replicas", "8", "--replica-discrete-values", "4,2,4"}),
                      Contains("4 is given twice"));
  REQUIRE_THROWS_WITH(
      parse({"--min-replicas", "2", "--max-replicas", "8", "--replica-discrete-values", "1,2"}),
      Contains("1 is outside the range 2..8"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2:8", "--replica-discrete-values", "2,16"}),
                      Contains("16 is outside the range 2..8") && Contains("--nnodes '2:8'"));
  for (const char* bad : {"", "2,,4", "two", "2;4"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse({"--max-replicas", "8", "--replica-discrete-values", bad}),
                        Contains("--replica-discrete-values") && Contains("like 2,4,8"));
  }
}

TEST_CASE("bad elastic values are ConfigErrors naming the flag and the value", "[cli]") {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--min-replicas", "0"}, "--min-replicas '0'"},
      {{"--min-replicas", "4", "--max-replicas", "2"}, "--max-replicas '2': below the minimum"},
      {{"--max-replicas", "0"}, "--max-replicas '0'"},
      {{"--min-replicas", "x"}, "--min-replicas 'x'"},
      {{"--replica-increment-step", "0"}, "--replica-increment-step '0'"},
      {{"--graceful-shutdown-timeout", "-1"}, "--graceful-shutdown-timeout '-1'"},
      {{"--scaling-timeout", "soon"}, "--scaling-timeout 'soon'"},
      {{"--faulty-scale-down-timeout", "-0.5"}, "--faulty-scale-down-timeout '-0.5'"},
      {{"--min-stable-period", "inf"}, "--min-stable-period 'inf'"},
      {{"--max-stable-period", "-3"}, "--max-stable-period '-3'"},
      {{"--min-stable-period", "700"}, "--min-stable-period '700': exceeds"},
      {{"--min-stable-period", "10", "--max-stable-period", "5"}, "--max-stable-period '5'"},
  };
  for (const auto& [args, message] : cases) {
    INFO(args.front() << " " << args[1]);
    REQUIRE_THROWS_AS(parse(args), ConfigError);
    REQUIRE_THROWS_WITH(parse(args), Contains(message));
  }
  // Zero is a valid duration: act at once.
  const auto c = parse({"--scaling-timeout", "0", "--min-stable-period", "0", "--max-stable-period",
                        "0", "--graceful-shutdown-timeout", "0"});
  CHECK(c.elastic.scaling_timeout == 0);
  CHECK(c.elastic.max_stable_period == 0);
}

TEST_CASE("a job config with every key fills the elastic options", "[cli]") {
  TempDir dir;
  const auto file = write(dir, "job.yaml", kFullConfig);
  const auto c = parse({"--config", file, "--rdzv-backend", "c10d"});
  const auto& e = c.elastic;
  CHECK(e.min_replicas == 2);
  CHECK(e.max_replicas == 8);
  CHECK(c.nnodes_min == 2);
  CHECK(c.nnodes_max == 8);
  CHECK(e.replica_discrete_values == std::vector<int>{2, 4, 8});
  CHECK(e.graceful_shutdown_timeout == 120);
  CHECK(e.scaling_timeout == 5.5);
  CHECK(e.faulty_scale_down_timeout == 45);
  CHECK(e.min_stable_period == 15);
  CHECK(e.max_stable_period == 900);
  CHECK(e.config_file == file);
  // Kept as written, for the worker SDK.
  const WorldSizeOverrides expected = {
      {2, {{"learningRate", "1e-4"}, {"microBatchSize", "32"}}},
      {4, {{"learningRate", "2.0e-4"}, {"microBatchSize", "16"}}},
  };
  CHECK(e.world_size_overrides == expected);
  CHECK(c.notes.empty());
  const auto step = parse_job_config("elasticPolicy: {replicaIncrementStep: 2}\n", "x.yaml");
  REQUIRE(step.replica_increment_step);
  CHECK(step.replica_increment_step->value == 2);
  CHECK(step.replica_increment_step->origin ==
        "x.yaml, line 1: elasticPolicy.replicaIncrementStep");
}

TEST_CASE("a relative --config path is kept absolute for the workers", "[cli]") {
  TempDir dir;
  write(dir, "job.yaml", "elasticPolicy: {maxReplicas: 2}\n");
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  LaunchConfig c;
  try {
    c = parse({"--config=job.yaml"});
  } catch (...) {
    std::filesystem::current_path(cwd);
    throw;
  }
  std::filesystem::current_path(cwd);
  CHECK(c.elastic.config_file == (dir / "job.yaml"));
}

TEST_CASE("command-line flags override the job config, field by field", "[cli]") {
  TempDir dir;
  const auto file = write(dir, "job.yaml", kFullConfig);
  auto c = parse({"--config", file, "--max-replicas", "4", "--scaling-timeout", "1",
                  "--replica-discrete-values", "2,4"});
  CHECK(c.elastic.min_replicas == 2);  // from the file
  CHECK(c.elastic.max_replicas == 4);
  CHECK(c.elastic.scaling_timeout == 1);
  CHECK(c.elastic.graceful_shutdown_timeout == 120);
  CHECK(c.elastic.replica_discrete_values == std::vector<int>{2, 4});
  // --nnodes is a flag too: it wins over the file's range, and says so.
  c = parse({"--config", file, "--nnodes", "4", "--replica-discrete-values", "4"});
  CHECK(c.nnodes_min == 4);
  CHECK(c.nnodes_max == 4);
  CHECK(has_note(c, "elasticPolicy.minReplicas '2': overridden by --nnodes '4'"));
  CHECK(has_note(c, "elasticPolicy.maxReplicas '8': overridden by --nnodes '4'"));
  // The file's values are validated after the override, not before.
  REQUIRE_THROWS_WITH(parse({"--config", file, "--max-replicas", "4"}),
                      Contains("8 is outside the range 2..4"));
}

TEST_CASE("an unknown key in the job config names the key, the file and the line", "[cli]") {
  TempDir dir;
  const auto typo = write(dir, "typo.yaml", "elasticPolicy:\n  minReplicas: 2\n  maxReplica: 4\n");
  REQUIRE_THROWS_WITH(parse({"--config", typo}),
                      Contains(typo + ", line 3") && Contains("unknown key 'maxReplica'") &&
                          Contains("in elasticPolicy") && Contains("maxReplicas"));
  REQUIRE_THROWS_WITH(parse_job_config("restartPolicy: {}\n", "j.yaml"),
                      Contains("j.yaml, line 1: unknown key 'restartPolicy' at the top level"));
  REQUIRE_THROWS_WITH(
      parse_job_config("worldSizeOverrides:\n  4: {lr: 1}\n", "j.yaml"),
      Contains("j.yaml, line 2") && Contains("'lr'") && Contains("worldSizeOverrides.4"));
  REQUIRE_THROWS_WITH(
      parse_job_config("elasticPolicy:\n  minReplicas: 1\n  minReplicas: 2\n", "j.yaml"),
      Contains("j.yaml, line 3: elasticPolicy.minReplicas is given twice"));
  REQUIRE_THROWS_WITH(parse_job_config("worldSizeOverrides:\n  8: {}\n  08: {}\n", "j.yaml"),
                      Contains("line 3") && Contains("world size 8 is given twice"));
}

TEST_CASE("a value of the wrong type names the key, the expected type and the line", "[cli]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"elasticPolicy:\n  minReplicas: 2\n\n  maxReplicas: four\n",
       "j.yaml, line 4: elasticPolicy.maxReplicas: expected an integer, got 'four'"},
      {"elasticPolicy:\n  minReplicas: \"2\"\n",
       "line 2: elasticPolicy.minReplicas: expected an integer, got the string '2'"},
      {"elasticPolicy:\n  minReplicas: 2.5\n",
       "line 2: elasticPolicy.minReplicas: expected an integer"},
      {"elasticPolicy:\n  minReplicas:\n  maxReplicas: 3\n",
       "line 2: elasticPolicy.minReplicas: expected an integer, got nothing"},
      {"elasticPolicy:\n  scalingTimeoutInSeconds: [1]\n",
       "line 2: elasticPolicy.scalingTimeoutInSeconds: expected a number, got a list"},
      {"elasticPolicy:\n  scalingTimeoutInSeconds: .inf\n",
       "line 2: elasticPolicy.scalingTimeoutInSeconds: expected a number"},
      {"elasticPolicy:\n  replicaDiscreteValues: 2,4\n",
       "line 2: elasticPolicy.replicaDiscreteValues: expected a list of integers"},
      {"elasticPolicy:\n  replicaDiscreteValues:\n    - 2\n    - x\n",
       "line 4: elasticPolicy.replicaDiscreteValues[1]: expected an integer, got 'x'"},
      {"elasticPolicy: 3\n", "line 1: elasticPolicy: expected a mapping, got '3'"},
      {"- 1\n", "line 1: the top level: expected a mapping, got a list"},
      {"worldSizeOverrides:\n  4: {microBatchSize: 0}\n",
       "line 2: worldSizeOverrides.4.microBatchSize: must be at least 1"},
      {"worldSizeOverrides:\n  4: {learningRate: fast}\n",
       "line 2: worldSizeOverrides.4.learningRate: expected a number, got 'fast'"},
      {"worldSizeOverrides:\n  four: {learningRate: 1}\n", "line 2: worldSizeOverrides key 'four'"},
      {"worldSizeOverrides:\n  0: {learningRate: 1}\n", "a world size must be at least 1 node"},
      {"worldSizeOverrides:\n  4:\n", "line 2: worldSizeOverrides.4: expected a mapping"},
  };
  for (const auto& [yaml, message] : cases) {
    INFO(yaml);
    REQUIRE_THROWS_AS(parse_job_config(yaml, "j.yaml"), ConfigError);
    REQUIRE_THROWS_WITH(parse_job_config(yaml, "j.yaml"), Contains(message));
  }
}

TEST_CASE(
    "a micro-batch range in worldSizeOverrides is kept as written, and refused where it "
    "contradicts itself, at the key that does",
    "[cli]") {
  const JobConfig c = parse_job_config(
      "worldSizeOverrides:\n  2: {maxMicroBatchSize: 6}  # emitted\n"
      "  3: {minMicroBatchSize: 02, maxMicroBatchSize: 4, learningRate: 1e-4}\n"
      "  4: {maxMicroBatchSize: 1048576}\n",
      "j.yaml");
  CHECK(c.world_size_overrides.at(2) ==
        std::map<std::string, std::string>{{"maxMicroBatchSize", "6"}});
  CHECK(c.world_size_overrides.at(3) ==
        std::map<std::string, std::string>{
            {"minMicroBatchSize", "02"}, {"maxMicroBatchSize", "4"}, {"learningRate", "1e-4"}});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  4: {microBatchSize: 4, maxMicroBatchSize: 8}\n",
       "line 2: worldSizeOverrides.4.maxMicroBatchSize: a range, or one size (microBatchSize), "
       "not both"},
      {"  4:\n    maxMicroBatchSize: 8\n    microBatchSize: 4\n",
       "line 4: worldSizeOverrides.4.microBatchSize: one size, or a range (minMicroBatchSize, "
       "maxMicroBatchSize), not both"},
      {"  4:\n    minMicroBatchSize: 2\n    learningRate: 1\n",
       "line 2: worldSizeOverrides.4.minMicroBatchSize: a range needs maxMicroBatchSize"},
      {"  4: {maxMicroBatchSize: 4, minMicroBatchSize: 5}\n",
       "line 2: worldSizeOverrides.4.minMicroBatchSize: the range's minimum 5 is above its maximum "
       "4"},
      {"  4: {maxMicroBatchSize: 0}\n",
       "line 2: worldSizeOverrides.4.maxMicroBatchSize: must be at least 1"},
      {"  4: {maxMicroBatchSize: 1048577}\n",
       "line 2: worldSizeOverrides.4.maxMicroBatchSize: must be at most 1048576"},
      {"  4: {minMicroBatchSize: x, maxMicroBatchSize: 2}\n",
       "line 2: worldSizeOverrides.4.minMicroBatchSize: expected an integer, got 'x'"},
  };
  for (const auto& [body, message] : cases) {
    const std::string yaml = "worldSizeOverrides:\n" + body;
    INFO(yaml);
    REQUIRE_THROWS_AS(parse_job_config(yaml, "j.yaml"), ConfigError);
    REQUIRE_THROWS_WITH(parse_job_config(yaml, "j.yaml"), Contains("j.yaml, " + message));
  }
}

TEST_CASE("a bad value from the job config names the file, the line and the key", "[cli]") {
  TempDir dir;
  const auto file = write(dir, "j.yaml", "elasticPolicy:\n  minReplicas: 4\n  maxReplicas: 2\n");
  REQUIRE_THROWS_WITH(
      parse({"--config", file}),
      Contains(file + ", line 3: elasticPolicy.maxReplicas '2': below the minimum") &&
          Contains("line 2: elasticPolicy.minReplicas '4'"));
  const auto negative = write(dir, "n.yaml", "elasticPolicy:\n  scalingTimeoutInSeconds: -1\n");
  REQUIRE_THROWS_WITH(parse({"--config", negative}),
                      Contains("line 2: elasticPolicy.scalingTimeoutInSeconds '-1': must not be "
                               "negative"));
}

TEST_CASE("a config file that is missing, unreadable or not YAML is refused, naming it", "[cli]") {
  TempDir dir;
  REQUIRE_THROWS_WITH(
      parse({"--config", dir / "missing.yaml"}),
      Contains("--config") && Contains("missing.yaml") && Contains("No such file or directory"));
  REQUIRE_THROWS_WITH(parse({"--config", dir.path().string()}), Contains("Is a directory"));
  const auto bad = write(dir, "bad.yaml", "elasticPolicy:\n  minReplicas: [1\n");
  REQUIRE_THROWS_WITH(parse({"--config", bad}), Contains(bad) && Contains("not valid YAML"));
  const auto two = write(dir, "two.yaml", "elasticPolicy: {}\n---\nelasticPolicy: {}\n");
  REQUIRE_THROWS_WITH(parse({"--config", two}), Contains("2 YAML documents"));
  const auto big = write(dir, "big.yaml", "# " + std::string(2 << 20, 'x') + "\n");
  REQUIRE_THROWS_WITH(parse({"--config", big}), Contains("larger than 1 MiB"));
  // An empty file, or empty sections, say nothing: the defaults hold.
  for (const char* text : {"", "# nothing yet\n", "elasticPolicy:\nworldSizeOverrides:\n"}) {
    const auto empty = write(dir, "empty.yaml", text);
    const auto c = parse({"--config", empty, "--nnodes", "3"});
    CHECK(c.elastic.min_replicas == 3);
    CHECK(c.elastic.scaling_timeout == 10);
    CHECK(c.notes.empty());
  }
}

TEST_CASE("a world size override the job can never use is noted, not refused", "[cli]") {
  TempDir dir;
  const auto file = write(dir, "j.yaml",
                          "elasticPolicy: {minReplicas: 2, maxReplicas: 8, replicaIncrementStep: "
                          "2}\nworldSizeOverrides:\n  3: {learningRate: 1}\n  4: {learningRate: "
                          "2}\n  16: {learningRate: 3}\n");
  const auto c = parse({"--config", file, "--rdzv-backend", "c10d"});
  CHECK(c.elastic.world_size_overrides.size() == 3);
  REQUIRE(c.notes.size() == 2);
  CHECK_THAT(c.notes[0],
             Contains("line 3: worldSizeOverrides.3: unused") && Contains("2 to 8 in steps of 2"));
  CHECK_THAT(c.notes[1], Contains("worldSizeOverrides.16: unused"));
}

TEST_CASE("a range runs as MIN with a note under static rendezvous, elastically under c10d",
          "[cli]") {
  auto c = parse({"--min-replicas", "2", "--max-replicas", "4", "--master-port", "1234"});
  CHECK(c.rdzv_backend == "static");
  CHECK(c.effective_nnodes() == 2);
  REQUIRE(c.notes.size() == 1);
  CHECK_THAT(c.notes[0], Contains("2:4") && Contains("static rendezvous cannot scale") &&
                             Contains("MIN (2 nodes)") && Contains("c10d"));
  c = parse({"--min-replicas", "2", "--max-replicas", "4", "--rdzv-backend", "c10d"});
  CHECK(c.nnodes_min == 2);
  CHECK(c.nnodes_max == 4);
  CHECK(c.notes.empty());
  CHECK(parse({"--nnodes", "3", "--master-port", "1"}).notes.empty());
}

TEST_CASE("--help has a complete elastic group with its defaults", "[cli]") {
  std::string text;
  try {
    parse({"--help"});
    FAIL("no HelpRequested");
  } catch (const HelpRequested& help) {
    text = help.text;
  }
  const auto group = text.find("\nelastic:\n");
  REQUIRE(group != std::string::npos);
  CHECK(group > text.find("HyperPod-compatible"));
  const std::string elastic = text.substr(group);
  for (const auto& f : flag_table()) {
    if (f.group != Group::kElastic) continue;
    INFO(f.long_name);
    CHECK_THAT(elastic, Contains(std::string(f.long_name) + " " + std::string(f.metavar)));
    if (!f.default_text.empty()) {
      CHECK_THAT(elastic, Contains("[default: " + std::string(f.default_text) + "]"));
    }
  }
  CHECK_THAT(elastic, Contains("[default: 60]") && Contains("[default: 600]"));
  CHECK_THAT(text, Contains("except the elastic flags and"));
}

TEST_CASE("to_json writes the elastic options under \"elastic\"", "[cli]") {
  const auto json = to_json(parse({"--max-replicas", "8", "--replica-discrete-values", "4,2",
                                   "--rdzv-backend", "c10d", "--scaling-timeout", "2.5"}));
  CHECK_THAT(json, Contains("\"elastic\":{\"min_replicas\":1,\"max_replicas\":8,"
                            "\"replica_increment_step\":1,\"replica_discrete_values\":[2,4],"
                            "\"graceful_shutdown_timeout\":60.0,\"scaling_timeout\":2.5,"));
  CHECK_THAT(json, Contains("\"config_file\":null,\"world_size_overrides\":{}}"));
}

TEST_CASE("--memory-tier-limit takes bytes with a binary suffix, auto or 0", "[cli]") {
  const auto limit = [](const std::string& v) {
    return parse({"--rdzv-backend", "c10d", "--memory-tier-limit", v}).memory_tier_limit;
  };
  CHECK_FALSE(parse({"--rdzv-backend", "c10d"}).memory_tier_limit);
  CHECK_FALSE(limit("auto"));
  CHECK(limit("0") == uint64_t{0});
  CHECK(limit("4096") == uint64_t{4096});
  CHECK(limit("2K") == uint64_t{2048});
  CHECK(limit("3m") == uint64_t{3} << 20);
  CHECK(limit("8G") == uint64_t{8} << 30);
  CHECK(limit("1T") == uint64_t{1} << 40);
  REQUIRE_THROWS_WITH(limit("8GB"),
                      Contains("--memory-tier-limit '8GB'") && Contains("not a size"));
  REQUIRE_THROWS_WITH(limit("-1"), Contains("not a size"));
  REQUIRE_THROWS_WITH(limit(""), Contains("not a size"));
  REQUIRE_THROWS_WITH(limit("99999999999T"), Contains("too large"));
}

TEST_CASE("--data-cache-limit takes the same sizes: auto by default, 0 for no cache", "[cli]") {
  const auto limit = [](const std::string& v) {
    return parse({"--data-cache-limit", v}).data_cache_limit;
  };
  CHECK_FALSE(parse({}).data_cache_limit);
  CHECK(limit("0") == uint64_t{0});
  CHECK(limit("512M") == uint64_t{512} << 20);
  REQUIRE_THROWS_WITH(limit("lots"),
                      Contains("--data-cache-limit 'lots'") && Contains("not a size"));
}

TEST_CASE("--memory-replicas and --memory-replication-rate", "[cli]") {
  const auto base = parse({"--rdzv-backend", "c10d"});
  CHECK(base.memory_replicas == 1);
  CHECK(base.memory_replication_rate == uint64_t{1} << 30);
  const auto c = parse(
      {"--rdzv-backend", "c10d", "--memory-replicas", "2", "--memory-replication-rate", "100M"});
  CHECK(c.memory_replicas == 2);
  CHECK(c.memory_replication_rate == uint64_t{100} << 20);
  CHECK(
      parse({"--rdzv-backend", "c10d", "--memory-replication-rate", "0"}).memory_replication_rate ==
      0);
  REQUIRE_THROWS_WITH(parse({"--rdzv-backend", "c10d", "--memory-replicas", "-1"}),
                      Contains("--memory-replicas '-1'"));
  REQUIRE_THROWS_WITH(parse({"--rdzv-backend", "c10d", "--memory-replication-rate", "auto"}),
                      Contains("not auto"));
}
