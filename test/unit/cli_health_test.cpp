// The health monitors' settings (cli/health_options.hpp): the flags, the
// job config's monitors section that gives the same settings, which wins,
// and the messages for bad values (file, line and key).
#include <catch2/catch.hpp>
#include <fstream>

#include "cli/parse.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

using namespace elasticrun::cli;
using Catch::Matchers::Contains;
using elasticrun::test::TempDir;
using Args = std::vector<std::string>;

namespace {

LaunchConfig parse(Args args) {
  args.push_back("train.py");
  return parse_launch_args(args, {}, 16, 0);
}

std::string write(const TempDir& dir, const std::string& text) {
  const auto path = dir / "job.yaml";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("the monitors are on where they cannot misfire by default", "[cli][health]") {
  const HealthOptions h = parse({}).health;
  CHECK(h.hang == HealthOptions::Hang::kAuto);
  CHECK(h.startup_timeout == 0);
  CHECK(h.non_finite_loss);
  CHECK(h.exclude_after == 3);
  CHECK(h.straggler_factor == 0);
  CHECK(h.log_rules.empty());
  CHECK_FALSE(h.restart_policy);
  CHECK(h.gpu == HealthOptions::Gpu::kAuto);
}

TEST_CASE("--hang-timeout takes seconds, auto or off", "[cli][health]") {
  CHECK(parse({"--hang-timeout", "off"}).health.hang == HealthOptions::Hang::kOff);
  const HealthOptions fixed = parse({"--hang-timeout", "90.5"}).health;
  CHECK(fixed.hang == HealthOptions::Hang::kFixed);
  CHECK(fixed.hang_seconds == 90.5);
  CHECK_THROWS_WITH(parse({"--hang-timeout", "0"}), Contains("must be above 0 (or off)"));
  CHECK_THROWS_WITH(parse({"--hang-timeout", "soon"}), Contains("--hang-timeout 'soon'"));
  CHECK_THROWS_WITH(parse({"--straggler-factor", "0.5"}), Contains("a factor above 1"));
  CHECK_THROWS_WITH(parse({"--exclude-after", "-1"}), Contains("must not be negative"));
}

TEST_CASE("the job config's monitors section gives the same settings as the flags",
          "[cli][health]") {
  TempDir dir;
  const auto file = write(dir, R"(monitors:
  hangTimeoutInSeconds: 120
  startupTimeoutInSeconds: 600
  nonFiniteLoss: false
  excludeAfterFaults: 5
  excludeWindowInSeconds: 60
  excludeCooldownInSeconds: 30
  stragglerFactor: 1.5
  stragglerDataPoints: 4
  gpuHealth: off
)");
  const HealthOptions h = parse({"--config", file}).health;
  CHECK(h.hang == HealthOptions::Hang::kFixed);
  CHECK(h.hang_seconds == 120);
  CHECK(h.startup_timeout == 600);
  CHECK_FALSE(h.non_finite_loss);
  CHECK(h.exclude_after == 5);
  CHECK(h.exclude_window == 60);
  CHECK(h.exclude_cooldown == 30);
  CHECK(h.straggler_factor == 1.5);
  CHECK(h.straggler_points == 4);
  CHECK(h.gpu == HealthOptions::Gpu::kOff);
}

TEST_CASE("a flag wins over the job config's monitors section", "[cli][health]") {
  TempDir dir;
  const auto file = write(dir, "monitors:\n  hangTimeoutInSeconds: 120\n");
  CHECK(parse({"--config", file, "--hang-timeout", "off"}).health.hang ==
        HealthOptions::Hang::kOff);
  CHECK(parse({"--hang-timeout", "off", "--config", file}).health.hang ==
        HealthOptions::Hang::kOff);
}

TEST_CASE("a bad monitors value names the file, the line and the key", "[cli][health]") {
  TempDir dir;
  const auto bad = write(dir, "monitors:\n  startupTimeoutInSeconds: -5\n");
  CHECK_THROWS_WITH(parse({"--config", bad}),
                    Contains("job.yaml, line 2: monitors.startupTimeoutInSeconds '-5': must not "
                             "be negative"));
  const auto unknown = write(dir, "monitors:\n  hangTimeout: 5\n");
  CHECK_THROWS_WITH(parse({"--config", unknown}),
                    Contains("line 2: unknown key 'hangTimeout' in monitors") &&
                        Contains("hangTimeoutInSeconds"));
  const auto list = write(dir, "monitors:\n  stragglerFactor: [1, 2]\n");
  CHECK_THROWS_WITH(parse({"--config", list}), Contains("monitors.stragglerFactor: expected a "
                                                        "single value"));
}

TEST_CASE("the runPolicy's rules and restart policy reach the health options", "[cli][health]") {
  TempDir dir;
  const auto file = write(dir, R"(runPolicy:
  jobMaxRetryCount: 4
  logMonitoringConfiguration:
    - name: "JobStart"
      logPattern: ".*Experiment configuration.*"
      expectedStartCutOffInSeconds: 120
)");
  const LaunchConfig c = parse({"--config", file, "--max-restarts", "2"});
  REQUIRE(c.health.log_rules.size() == 1);
  CHECK(c.health.log_rules[0].name == "JobStart");
  REQUIRE(c.health.restart_policy);
  CHECK(c.health.restart_policy->job_max_retry_count == 4);
  CHECK(c.health.max_restarts_given);
  CHECK_FALSE(parse({"--config", file}).health.max_restarts_given);
}
