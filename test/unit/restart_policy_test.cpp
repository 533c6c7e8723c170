// The restart policy (health/restart_policy): restarts in place, full-job
// restarts, evaluation windows, the caps over the job's life, and the state
// another agent continues from. HyperPod's documented policy
// (numRestartBeforeFullJobRestart 3, evalPeriodSeconds 21600,
// maxFullJobRestarts 1, jobMaxRetryCount 50) with its window scaled down to
// 60 s.
#include "health/restart_policy.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"

using namespace elasticrun::health;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using elasticrun::ConfigError;

namespace {

// 2026-12-01T22:00:00Z; any wall-clock time would do.
const WallTime kT0{std::chrono::milliseconds(1'796'162'400'000)};

RestartPolicySpec documented() {
  RestartPolicySpec s;
  s.num_restart_before_full_job_restart = 3;
  s.eval_period_seconds = 60;
  s.max_full_job_restarts = 1;
  s.job_max_retry_count = 50;
  return s;
}

constexpr auto kInPlace = RestartAction::kInPlace;
constexpr auto kFullJob = RestartAction::kFullJob;
constexpr auto kFail = RestartAction::kFail;

// The actions for failures at kT0 + each offset.
std::vector<RestartAction> actions(RestartPolicy& p, std::vector<std::chrono::milliseconds> at) {
  std::vector<RestartAction> out;
  for (auto offset : at) out.push_back(p.on_failure(kT0 + offset).action);
  return out;
}

}  // namespace

TEST_CASE("without a restart policy a failure restarts in place up to --max-restarts, as torchrun",
          "[health]") {
  RestartPolicy p(std::nullopt, 2);
  auto d = p.on_failure(kT0);
  CHECK(d.action == kInPlace);
  CHECK(d.reason == "restart 1 of 2 (--max-restarts)");
  CHECK(p.on_failure(kT0 + 1h).action == kInPlace);
  d = p.on_failure(kT0 + 2h);
  CHECK(d.action == kFail);
  CHECK(d.reason == "--max-restarts 2 reached: 2 restarts made");
  // torchrun's default is no restart.
  RestartPolicy none(std::nullopt, std::nullopt);
  CHECK(none.on_failure(kT0).action == kFail);
}

TEST_CASE(
    "failures restart in place up to numRestartBeforeFullJobRestart, then the job restarts "
    "in full, then it fails",
    "[health]") {
  RestartPolicy p(documented(), std::nullopt);
  CHECK(actions(p, {0s, 1s, 2s}) == std::vector{kInPlace, kInPlace, kInPlace});
  auto d = p.on_failure(kT0 + 3s);
  CHECK(d.action == kFullJob);
  CHECK_THAT(d.reason, Contains("3 restarts in place used (numRestartBeforeFullJobRestart 3): "
                                "full-job restart 1 of 1 (maxFullJobRestarts)") &&
                           Contains("3 s into its 60 s") &&
                           Contains("restart 4 of 50 over the job (jobMaxRetryCount)"));
  // The full restart starts the in-place count again; the full count stays.
  CHECK(actions(p, {4s, 5s, 6s}) == std::vector{kInPlace, kInPlace, kInPlace});
  d = p.on_failure(kT0 + 7s);
  CHECK(d.action == kFail);
  CHECK_THAT(d.reason, Contains("3 restarts in place used") &&
                           Contains("1 full-job restarts (maxFullJobRestarts 1)"));
  CHECK(p.state().in_place == 3);
  CHECK(p.state().full_job == 1);
  CHECK(p.state().total == 7);
}

TEST_CASE(
    "the first failure at or after the window's end opens a new window with both counts at "
    "zero",
    "[health]") {
  RestartPolicy p(documented(), std::nullopt);
  // The window opens at the first failure, at 10 s, and ends at 70 s.
  CHECK(actions(p, {10s, 20s, 30s, 40s, 50s, 60s, 69999ms}) ==
        std::vector{kInPlace, kInPlace, kInPlace, kFullJob, kInPlace, kInPlace, kInPlace});
  auto d = p.on_failure(kT0 + 70s);
  CHECK(d.action == kInPlace);
  CHECK_THAT(d.reason, Contains("restart in place 1 of 3 (numRestartBeforeFullJobRestart) in a "
                                "new evaluation window of 60 s"));
  CHECK(p.state().window_start == kT0 + 70s);
  CHECK(p.state().total == 8);
  // A new window allows a full-job restart again.
  CHECK(actions(p, {71s, 72s, 73s, 74s}) == std::vector{kInPlace, kInPlace, kFullJob, kInPlace});
}

TEST_CASE("jobMaxRetryCount caps the restarts of both kinds over the job's life, across windows",
          "[health]") {
  RestartPolicySpec s = documented();
  s.job_max_retry_count = 5;
  RestartPolicy p(s, std::nullopt);
  // Each failure a window apart: always the first restart in place of its window.
  CHECK(actions(p, {0s, 1min, 2min, 3min, 4min}) ==
        std::vector{kInPlace, kInPlace, kInPlace, kInPlace, kInPlace});
  const auto d = p.on_failure(kT0 + 5min);
  CHECK(d.action == kFail);
  CHECK(d.reason == "jobMaxRetryCount 5 reached: 5 restarts made");
  // A failed decision leaves the state as it was.
  CHECK(p.state().total == 5);
  CHECK(p.state().window_start == kT0 + 4min);
}

TEST_CASE("--max-restarts caps the total too when a restart policy is given", "[health]") {
  RestartPolicy p(documented(), 4);
  CHECK(actions(p, {0s, 1s, 2s, 3s}) == std::vector{kInPlace, kInPlace, kInPlace, kFullJob});
  const auto d = p.on_failure(kT0 + 2min);
  CHECK(d.action == kFail);
  CHECK(d.reason == "--max-restarts 4 reached: 4 restarts made");
  RestartPolicy both(documented(), 10);
  CHECK_THAT(both.on_failure(kT0).reason,
             Contains("restart 1 of 50 over the job (jobMaxRetryCount), 1 of 10 (--max-restarts)"));
}

TEST_CASE("jobMaxRetryCount alone restarts in place up to it, in one window for the job's life",
          "[health]") {
  RestartPolicySpec s;
  s.job_max_retry_count = 3;
  RestartPolicy p(s, std::nullopt);
  const auto d = p.on_failure(kT0);
  CHECK(d.action == kInPlace);
  CHECK(d.reason == "restart in place; restart 1 of 3 over the job (jobMaxRetryCount)");
  CHECK(actions(p, {1h, 48h, 49h}) == std::vector{kInPlace, kInPlace, kFail});
}

TEST_CASE("maxFullJobRestarts 0 fails the failure that would escalate", "[health]") {
  RestartPolicySpec s = documented();
  s.num_restart_before_full_job_restart = 2;
  s.max_full_job_restarts = 0;
  RestartPolicy p(s, std::nullopt);
  CHECK(actions(p, {0s, 1s, 2s}) == std::vector{kInPlace, kInPlace, kFail});
  // numRestartBeforeFullJobRestart 0: the first failure escalates.
  s.num_restart_before_full_job_restart = 0;
  s.max_full_job_restarts = 1;
  RestartPolicy full(s, std::nullopt);
  CHECK(actions(full, {0s, 1s}) == std::vector{kFullJob, kFail});
}

TEST_CASE("an absent limit is no limit", "[health]") {
  RestartPolicySpec s;
  s.eval_period_seconds = 60;
  s.max_full_job_restarts = 1;  // never reached: nothing escalates
  RestartPolicy in_place(s, std::nullopt);
  for (int i = 0; i < 200; ++i) REQUIRE(in_place.on_failure(kT0 + i * 1s).action == kInPlace);

  s = documented();
  s.max_full_job_restarts.reset();
  s.job_max_retry_count.reset();
  RestartPolicy full(s, std::nullopt);
  for (int i = 0; i < 50; ++i) {
    INFO(i);
    REQUIRE(full.on_failure(kT0 + i * 1s).action == (i % 4 == 3 ? kFullJob : kInPlace));
  }
  const auto d = full.on_failure(kT0 + 59s);
  CHECK_THAT(d.reason, Contains("restart 51 over the job") && !Contains("jobMaxRetryCount"));
}

TEST_CASE("a clock that went back puts the failure into the current window", "[health]") {
  RestartPolicy p(documented(), std::nullopt);
  CHECK(actions(p, {10s, 5s, 0s, 20s}) == std::vector{kInPlace, kInPlace, kInPlace, kFullJob});
  CHECK(p.state().window_start == kT0 + 10s);
}

TEST_CASE("an agent that continues from the serialised state decides as the first would have",
          "[health]") {
  RestartPolicy straight(documented(), std::nullopt);
  RestartState stored;  // what the store holds between failures
  const std::vector<std::chrono::milliseconds> failures = {
      0s, 5s, 6s, 7s, 30s, 31s, 59s, 61s, 62s, 100s, 101s, 119s, 120s, 121s, 122s, 123s};
  for (auto at : failures) {
    INFO(at.count());
    RestartPolicy other(documented(), std::nullopt, RestartState::parse(stored.serialize()));
    const auto expected = straight.on_failure(kT0 + at);
    const auto got = other.on_failure(kT0 + at);
    CHECK(got.action == expected.action);
    CHECK(got.reason == expected.reason);
    stored = other.state();
    CHECK(stored == straight.state());
  }
}

TEST_CASE("a state written under other limits is judged by the limits in force", "[health]") {
  RestartState s;
  s.window_start = kT0;
  s.in_place = 5;
  s.full_job = 0;
  s.total = 5;
  // More restarts in place than numRestartBeforeFullJobRestart allows: escalate.
  RestartPolicy p(documented(), std::nullopt, s);
  CHECK(p.on_failure(kT0 + 1s).action == kFullJob);
  // A total beyond jobMaxRetryCount: fail.
  s.total = 60;
  RestartPolicy capped(documented(), std::nullopt, s);
  CHECK(capped.on_failure(kT0 + 1s).action == kFail);
}

TEST_CASE("the restart state serialises to one versioned line and parses back exactly",
          "[health]") {
  RestartState fresh;
  CHECK(fresh.serialize() == "v1;inplace=0;full=0;total=0");
  CHECK(RestartState::parse("v1;inplace=0;full=0;total=0") == fresh);
  RestartPolicy p(documented(), std::nullopt);
  for (auto at : {0s, 1s, 2s, 3s, 4s}) p.on_failure(kT0 + at);
  const std::string text = p.state().serialize();
  CHECK(text == "v1;win=1796162400000;inplace=1;full=1;total=5");
  CHECK(RestartState::parse(text) == p.state());
  CHECK(text.find('\n') == std::string::npos);
}

TEST_CASE("parsing a restart state rejects every text serialise does not write", "[health]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "not a v1 restart state"},
      {"v2;inplace=0;full=0;total=0", "not a v1 restart state"},
      {"v1", "no inplace"},
      {"v1;", "trailing ';'"},
      {"v1;inplace=0;full=0;total=0;", "trailing ';'"},
      {"v1;win=5", "no inplace"},
      {"v1;inplace=0;total=0", "misplaced key 'total'"},
      {"v1;inplace=0;full=0", "no total"},
      {"v1;full=0;inplace=0;total=0", "misplaced key 'inplace'"},
      {"v1;inplace=0;full=0;total=0;win=5", "misplaced key 'win'"},
      {"v1;inplace=0;inplace=0;full=0;total=0", "repeated or misplaced key 'inplace'"},
      {"v1;inplace=0;full=0;total=0;extra=1", "unknown"},
      {"v1;inplace;full=0;total=0", "has no '='"},
      {"v1;inplace=01;full=0;total=1", "bad number '01'"},
      {"v1;inplace=-1;full=0;total=0", "bad number '-1'"},
      {"v1;inplace=+1;full=0;total=1", "bad number '+1'"},
      {"v1;inplace=;full=0;total=0", "bad number ''"},
      {"v1;inplace=1x;full=0;total=1", "bad number '1x'"},
      {"v1;win=-5;inplace=0;full=0;total=0", "bad number '-5'"},
      {"v1;inplace=2147483648;full=0;total=0", "out of range"},
      {"v1;win=9223372036854775807;inplace=0;full=0;total=0", "out of range"},
      {"v1;inplace=2;full=1;total=2", "more restarts in the window than in total"},
      {"v1;inplace=0;full=0;total=0" + std::string(200, ' '), "longer than 128 bytes"},
  };
  for (const auto& [text, why] : bad) {
    INFO(text);
    REQUIRE_THROWS_AS(RestartState::parse(text), ConfigError);
    REQUIRE_THROWS_WITH(RestartState::parse(text), Contains("restart state '") && Contains(why));
  }
}

TEST_CASE("limits that cannot work are refused with the key to fix", "[health]") {
  const auto refused = [](RestartPolicySpec s, std::optional<int> max, const std::string& key) {
    INFO(key);
    REQUIRE_THROWS_AS(RestartPolicy(s, max), ConfigError);
    REQUIRE_THROWS_WITH(RestartPolicy(s, max), Contains(key));
  };
  RestartPolicySpec s = documented();
  s.num_restart_before_full_job_restart = -1;
  refused(s, std::nullopt, "numRestartBeforeFullJobRestart must not be negative");
  s = documented();
  s.max_full_job_restarts = -1;
  refused(s, std::nullopt, "maxFullJobRestarts");
  s = documented();
  s.job_max_retry_count = -2;
  refused(s, std::nullopt, "jobMaxRetryCount");
  for (double period : {0.0, -1.0, std::nan("")}) {
    s = documented();
    s.eval_period_seconds = period;
    refused(s, std::nullopt, "evalPeriodSeconds must be a positive number");
  }
  refused(documented(), -1, "--max-restarts must not be negative");
  // An endless window is fine: one window for the job's life.
  s = documented();
  s.eval_period_seconds = 1e300;
  RestartPolicy endless(s, std::nullopt);
  CHECK(actions(endless, {0s, 1s, 2s, 3s, 24h * 3650}) ==
        std::vector{kInPlace, kInPlace, kInPlace, kFullJob, kInPlace});
}
