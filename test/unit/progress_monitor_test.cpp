// The monitors over the SDK's published progress (health/progress_monitor):
// hangs with a fixed or an automatic limit, the start-up limit, marked
// sections, non-finite losses, and which rank is blamed.
#include "health/progress_monitor.hpp"

#include <catch2/catch.hpp>
#include <cmath>

using namespace elasticrun::health;
using namespace std::chrono_literals;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + 24h;

RankSample at(int64_t step) {
  RankSample s;
  s.attached = true;
  s.step = step;
  return s;
}

ProgressConfig fixed(Millis limit) {
  ProgressConfig c;
  c.hang.mode = HangLimit::Mode::kFixed;
  c.hang.fixed = limit;
  return c;
}

// Feeds steps every `step` for `n` steps on every rank; returns the time after.
Clock::time_point run_steps(ProgressMonitor& m, int ranks, int n, Millis step,
                            Clock::time_point t = kT0) {
  for (int i = 0; i < n; ++i) {
    t += step;
    std::vector<RankSample> all(static_cast<size_t>(ranks), at(i));
    REQUIRE_FALSE(m.observe(t, all));
  }
  return t;
}

}  // namespace

TEST_CASE("a rank that stops stepping is a hang once the fixed limit passes", "[health]") {
  ProgressMonitor m(fixed(10s), 2, kT0);
  Clock::time_point t = run_steps(m, 2, 3, 1s);
  // Rank 1 goes on for a while, rank 0 is stuck at step 2.
  CHECK_FALSE(m.observe(t + 5s, {at(2), at(5)}));
  CHECK_FALSE(m.observe(t + 10s, {at(2), at(10)}));
  const auto f = m.observe(t + 10s + 1ms, {at(2), at(11)});
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kHang);
  CHECK(f->local_rank == 0);
  CHECK(f->last_step == 2);
  CHECK_THAT(f->message, Catch::Matchers::Contains("made no progress for 10.0 s after step 2"));
  // One fault per attempt.
  CHECK_FALSE(m.observe(t + 60s, {at(2), at(11)}));
}

TEST_CASE("of several hung ranks the one that stopped first is blamed", "[health]") {
  ProgressMonitor m(fixed(5s), 3, kT0);
  Clock::time_point t = run_steps(m, 3, 2, 1s);
  // Rank 2 stops at step 1; ranks 0 and 1 make one more step, then wait for it.
  CHECK_FALSE(m.observe(t + 1s, {at(2), at(2), at(1)}));
  const auto f = m.observe(t + 7s, {at(2), at(2), at(1)});
  REQUIRE(f);
  CHECK(f->local_rank == 2);
}

TEST_CASE("the automatic limit follows the job's own step times with a floor", "[health]") {
  ProgressConfig c;
  c.hang.mode = HangLimit::Mode::kAuto;
  c.hang.auto_factor = 10;
  c.hang.auto_floor = 3s;
  c.hang.auto_min_steps = 5;
  ProgressMonitor m(c, 1, kT0);
  // Before enough steps were timed there is no limit at all.
  Clock::time_point t = run_steps(m, 1, 4, 1s);
  CHECK_FALSE(m.hang_limit());
  t = run_steps(m, 1, 10, 1s, t);
  REQUIRE(m.hang_limit());
  CHECK(*m.hang_limit() == 10s);  // 10 x the slowest step (1 s), above the floor
  // A slow machine: 2 s steps raise the limit instead of tripping it.
  for (int i = 0; i < 5; ++i) {
    t += 2s;
    REQUIRE_FALSE(m.observe(t, {at(14 + i)}));
  }
  CHECK(*m.hang_limit() == 20s);
  CHECK_FALSE(m.observe(t + 19s, {at(18)}));
  CHECK(m.observe(t + 21s, {at(18)}));
}

TEST_CASE("fast steps sampled once in a while give the time per step, not per sample", "[health]") {
  ProgressConfig c;
  c.hang.mode = HangLimit::Mode::kAuto;
  c.hang.auto_factor = 10;
  c.hang.auto_floor = 1s;
  c.hang.auto_min_steps = 1;
  ProgressMonitor m(c, 1, kT0);
  REQUIRE_FALSE(m.observe(kT0 + 100ms, {at(0)}));
  REQUIRE_FALSE(m.observe(kT0 + 200ms, {at(50)}));  // 50 steps in 100 ms
  REQUIRE(m.slowest_step());
  CHECK(*m.slowest_step() == 2ms);
  CHECK(*m.hang_limit() == 1s);  // the floor
}

TEST_CASE("a marked section is no hang until its own limit passes", "[health]") {
  ProgressMonitor m(fixed(5s), 1, kT0);
  Clock::time_point t = run_steps(m, 1, 3, 1s);
  RankSample eval = at(2);
  eval.in_section = true;
  eval.section = "eval";
  eval.section_limit = 60s;
  CHECK_FALSE(m.observe(t + 1s, {eval}));
  CHECK_FALSE(m.observe(t + 59s, {eval}));
  const auto f = m.observe(t + 62s, {eval});
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kHang);
  CHECK_THAT(f->message, Catch::Matchers::Contains("in section 'eval'"));
}

TEST_CASE("a section without a limit is never a hang, and leaving it is progress", "[health]") {
  ProgressMonitor m(fixed(5s), 1, kT0);
  Clock::time_point t = run_steps(m, 1, 3, 1s);
  RankSample save = at(2);
  save.in_section = true;
  save.section = "save";
  CHECK_FALSE(m.observe(t + 1s, {save}));
  CHECK_FALSE(m.observe(t + 3600s, {save}));
  // Out of the section at step 2: the limit counts from there, not from step 2.
  CHECK_FALSE(m.observe(t + 3601s, {at(2)}));
  CHECK_FALSE(m.observe(t + 3605s, {at(2)}));
  CHECK(m.observe(t + 3607s, {at(2)}));
}

TEST_CASE("the start-up limit covers ranks that never published a step", "[health]") {
  ProgressConfig c = fixed(5s);
  c.startup = 30s;
  ProgressMonitor m(c, 2, kT0);
  RankSample attached_only;
  attached_only.attached = true;
  RankSample not_attached;  // stuck before it could attach: the other one did
  CHECK_FALSE(m.observe(kT0 + 29s, {attached_only, not_attached}));
  const auto f = m.observe(kT0 + 31s, {attached_only, not_attached});
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kStartup);
  CHECK(f->local_rank == 0);
}

TEST_CASE("workers that never attach the SDK are not watched", "[health]") {
  ProgressConfig c = fixed(1s);
  c.startup = 1s;
  ProgressMonitor m(c, 2, kT0);
  CHECK_FALSE(m.observe(kT0 + 1h, {RankSample{}, RankSample{}}));
}

TEST_CASE("a non-finite loss is a fault at once and wins over a wait", "[health]") {
  ProgressMonitor m(fixed(5s), 2, kT0);
  Clock::time_point t = run_steps(m, 2, 3, 1s);
  RankSample nan = at(3);
  nan.loss_non_finite = true;
  nan.loss = std::nan("");
  const auto f = m.observe(t + 10s, {at(2), nan});  // rank 0 is past its limit too
  REQUIRE(f);
  CHECK(f->kind == FaultKind::kNonFiniteLoss);
  CHECK(f->local_rank == 1);
  CHECK_THAT(f->message, Catch::Matchers::Contains("loss of nan at step 3"));
}

TEST_CASE("the non-finite monitor can be turned off", "[health]") {
  ProgressConfig c = fixed(1h);
  c.non_finite_loss = false;
  ProgressMonitor m(c, 1, kT0);
  RankSample inf = at(0);
  inf.loss_non_finite = true;
  inf.loss = INFINITY;
  CHECK_FALSE(m.observe(kT0 + 1s, {inf}));
}

TEST_CASE("a worker that exited is not a hang", "[health]") {
  ProgressMonitor m(fixed(1s), 1, kT0);
  run_steps(m, 1, 2, 100ms);
  RankSample gone = at(1);
  gone.running = false;
  CHECK_FALSE(m.observe(kT0 + 1h, {gone}));
}

TEST_CASE("fault kinds have stable names and HyperPod's reasons", "[health]") {
  for (FaultKind k :
       {FaultKind::kHang, FaultKind::kStartup, FaultKind::kNonFiniteLoss, FaultKind::kLogFault,
        FaultKind::kLogHang, FaultKind::kLogSlow, FaultKind::kStraggler, FaultKind::kGpu}) {
    CHECK(fault_kind_from_string(to_string(k)) == k);
  }
  Fault f;
  f.kind = FaultKind::kLogHang;
  f.monitor = "JobHangingDetection";
  f.message = "no match in 300 s";
  CHECK(f.reason() == "LogHang_JobHangingDetection");
  CHECK(f.describe() == "LogHang_JobHangingDetection: no match in 300 s");
}
