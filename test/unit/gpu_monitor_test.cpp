// GPU health over the driver's readings (health/gpu_monitor): which XIDs,
// ECC counts and remap states are faults of an attempt, which are notes,
// and what readings from before the attempt count for.
#include "health/gpu_monitor.hpp"

#include <catch2/catch.hpp>

using namespace elasticrun::health;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kT0 = Clock::time_point{} + 24h;

std::vector<GpuDevice> two_gpus() {
  return {{"0000:1b:00.0", 0}, {"0000:9a:00.0", 1}};
}

GpuReading healthy(uint64_t ecc = 0) {
  GpuReading r;
  r.ecc_uncorrected = ecc;
  r.retired_pages_pending = false;
  r.remap_pending = false;
  r.remap_failed = false;
  return r;
}

GpuSnapshot at(Clock::time_point t, GpuReading gpu0, GpuReading gpu1) {
  return {t, {std::move(gpu0), std::move(gpu1)}};
}

GpuReading with_xids(std::vector<uint64_t> xids, uint64_t ecc = 0) {
  GpuReading r = healthy(ecc);
  r.xids = std::move(xids);
  return r;
}

}  // namespace

TEST_CASE("a hardware XID during the attempt is a fault of the node naming the GPU", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  CHECK_FALSE(m.observe(at(kT0 + 1s, healthy(), healthy())).fault);
  const auto v = m.observe(at(kT0 + 6s, healthy(), with_xids({79})));
  REQUIRE(v.fault);
  CHECK(v.fault->kind == FaultKind::kGpu);
  CHECK(v.fault->monitor == "gpu");
  CHECK(v.fault->local_rank == -1);
  CHECK(v.fault->reason() == "GpuError");
  CHECK_THAT(v.fault->message, Contains("GPU 0000:9a:00.0 (CUDA 1) reported XID 79"));
  CHECK_THAT(v.fault->message, Contains("fallen off the bus"));
  CHECK(v.notes.empty());
}

TEST_CASE("every XID of the hardware set is a fault and application XIDs are not", "[gpu]") {
  for (uint64_t xid : {48, 64, 74, 79, 94, 95, 119, 120, 140}) {
    GpuMonitor m(two_gpus());
    m.begin_attempt(kT0);
    INFO("XID " << xid);
    CHECK(m.observe(at(kT0, with_xids({xid}), healthy())).fault);
  }
  for (uint64_t xid : {13, 31, 43, 45, 63, 92, 154}) {
    GpuMonitor m(two_gpus());
    m.begin_attempt(kT0);
    INFO("XID " << xid);
    const auto v = m.observe(at(kT0, with_xids({xid}), healthy()));
    CHECK_FALSE(v.fault);
    REQUIRE(v.notes.size() == 1);
    CHECK_THAT(v.notes[0], Contains("XID " + std::to_string(xid)));
    CHECK_THAT(v.notes[0], Contains("(not a fault)"));
  }
}

TEST_CASE("the first hardware XID of a reading is the fault and the rest are noted once", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  const auto v = m.observe(at(kT0, with_xids({13, 48, 63, 48}), with_xids({74})));
  REQUIRE(v.fault);
  CHECK_THAT(v.fault->message, Contains("0000:1b:00.0 (CUDA 0) reported XID 48"));
  // 13 and 63 are no faults; the second 48 was the fault already; GPU 1's
  // 74 came after the attempt had its fault.
  REQUIRE(v.notes.size() == 3);
  CHECK_THAT(v.notes[0], Contains("XID 13"));
  CHECK_THAT(v.notes[1], Contains("XID 63"));
  CHECK_THAT(v.notes[2], Contains("XID 74"));
  CHECK_THAT(v.notes[2], Contains("this attempt already has its fault"));
  // An XID noted once is not noted again, nor is a second fault returned.
  const auto again = m.observe(at(kT0 + 5s, with_xids({13, 95}), with_xids({74})));
  CHECK_FALSE(again.fault);
  REQUIRE(again.notes.size() == 1);
  CHECK_THAT(again.notes[0], Contains("XID 95"));
}

TEST_CASE("an uncorrectable ECC count that rises during the attempt is a fault", "[gpu]") {
  GpuMonitor m(two_gpus());
  // Errors from before the job are the baseline, not a fault.
  m.begin_attempt(kT0);
  CHECK_FALSE(m.observe(at(kT0, healthy(3), healthy(0))).fault);
  CHECK_FALSE(m.observe(at(kT0 + 5s, healthy(3), healthy(0))).fault);
  const auto v = m.observe(at(kT0 + 10s, healthy(5), healthy(0)));
  REQUIRE(v.fault);
  CHECK_THAT(v.fault->message, Contains("GPU 0000:1b:00.0 (CUDA 0)"));
  CHECK_THAT(v.fault->message, Contains("uncorrectable ECC error count rose from 3 to 5"));
}

TEST_CASE("an ECC count reset with its GPU is judged from its new value", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  CHECK_FALSE(m.observe(at(kT0, healthy(5), healthy())).fault);
  CHECK_FALSE(m.observe(at(kT0 + 5s, healthy(0), healthy())).fault);
  const auto v = m.observe(at(kT0 + 10s, healthy(1), healthy()));
  REQUIRE(v.fault);
  CHECK_THAT(v.fault->message, Contains("rose from 0 to 1"));
}

TEST_CASE("a GPU whose ECC count cannot be read is not judged by it", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  GpuReading unknown = healthy();
  unknown.ecc_uncorrected.reset();
  CHECK_FALSE(m.observe(at(kT0, unknown, healthy())).fault);
  CHECK_FALSE(m.observe(at(kT0 + 5s, healthy(7), healthy())).fault);  // the first count: a baseline
  CHECK(m.observe(at(kT0 + 10s, healthy(8), healthy())).fault);
}

TEST_CASE("a failed row remapping and a lost GPU are faults", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  GpuReading failed = healthy();
  failed.remap_failed = true;
  auto v = m.observe(at(kT0, healthy(), failed));
  REQUIRE(v.fault);
  CHECK_THAT(v.fault->message, Contains("0000:9a:00.0 (CUDA 1): a row remapping failed"));

  GpuMonitor lost_monitor(two_gpus());
  lost_monitor.begin_attempt(kT0);
  GpuReading lost;
  lost.lost = true;
  v = lost_monitor.observe(at(kT0, lost, healthy()));
  REQUIRE(v.fault);
  CHECK_THAT(v.fault->message, Contains("0000:1b:00.0 (CUDA 0) is lost"));
}

TEST_CASE("pending retirements and remaps are noted once, not faults", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  GpuReading pending = healthy();
  pending.retired_pages_pending = true;
  pending.remap_pending = true;
  auto v = m.observe(at(kT0, pending, healthy()));
  CHECK_FALSE(v.fault);
  REQUIRE(v.notes.size() == 2);
  CHECK_THAT(v.notes[0], Contains("GPU 0000:1b:00.0 (CUDA 0): retired pages are pending"));
  CHECK_THAT(v.notes[1], Contains("GPU 0000:1b:00.0 (CUDA 0): remapped rows are pending"));
  // Still pending: nothing new, in this attempt or the next.
  CHECK(m.observe(at(kT0 + 5s, pending, healthy())).notes.empty());
  m.begin_attempt(kT0 + 60s);
  CHECK(m.observe(at(kT0 + 61s, pending, healthy())).notes.empty());
  // Cleared by a reset, then pending again: noted again.
  CHECK(m.observe(at(kT0 + 70s, healthy(), healthy())).notes.empty());
  CHECK(m.observe(at(kT0 + 75s, pending, healthy())).notes.size() == 2);
}

TEST_CASE("readings from before the attempt began never fault it", "[gpu]") {
  GpuMonitor m(two_gpus());
  // The agent's first reading, before any attempt: an XID (during the
  // rendezvous) is a note.
  auto v = m.observe(at(kT0, with_xids({79}), healthy(2)));
  CHECK_FALSE(v.fault);
  REQUIRE(v.notes.size() == 1);
  CHECK_THAT(v.notes[0], Contains("XID 79"));
  CHECK_THAT(v.notes[0], Contains("before this attempt began"));

  m.begin_attempt(kT0 + 10s);
  // A reading taken before the start but judged after it: its ECC count is
  // the baseline (the rise belongs to the attempt before), its XIDs notes.
  v = m.observe(at(kT0 + 9s, with_xids({94}), healthy(4)));
  CHECK_FALSE(v.fault);
  CHECK(v.notes.size() == 1);
  CHECK_FALSE(m.observe(at(kT0 + 15s, healthy(), healthy(4))).fault);
  CHECK(m.observe(at(kT0 + 20s, healthy(), healthy(5))).fault);
}

TEST_CASE("each attempt gets one fault of its own, judged from its own baseline", "[gpu]") {
  GpuMonitor m(two_gpus());
  m.begin_attempt(kT0);
  CHECK_FALSE(m.observe(at(kT0, healthy(0), healthy())).fault);
  CHECK(m.observe(at(kT0 + 5s, healthy(1), healthy())).fault);
  // The DBE that ended attempt 0 is not held against attempt 1.
  m.begin_attempt(kT0 + 30s);
  CHECK_FALSE(m.observe(at(kT0 + 31s, healthy(1), healthy())).fault);
  CHECK_FALSE(m.observe(at(kT0 + 36s, with_xids({13}, 1), healthy())).fault);
  const auto v = m.observe(at(kT0 + 41s, healthy(1), with_xids({48})));
  REQUIRE(v.fault);
  CHECK_THAT(v.fault->message, Contains("XID 48"));
}

TEST_CASE("readings outside any attempt give notes only", "[gpu]") {
  GpuMonitor m(two_gpus());
  GpuReading failed = healthy(9);
  failed.remap_failed = true;
  failed.lost = true;
  CHECK_FALSE(m.observe(at(kT0, failed, with_xids({48}))).fault);
}
