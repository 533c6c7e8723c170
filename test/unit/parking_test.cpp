// --inprocess-restart's agent side: the control block's parking flags and
// events (agent/parking), and the assignment published with them.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/parking.hpp"
#include "control/assignment.hpp"
#include "process_helpers.hpp"
#include "temp_dir.hpp"

using namespace elasticrun;
using namespace elasticrun::agent;

TEST_CASE("a worker counts as re-forming and parked by its own process's flags only", "[reform]") {
  test::TempDir dir;
  auto block = control::ControlBlock::create(dir / "control", 2).value();
  control::ControlBlock::SlotView v;
  v.flags = control::kFlagAttached | control::kFlagInprocess;
  v.pid = 4242;
  block.write_slot(0, v);
  CHECK(reforms(block, 0, 4242));
  CHECK_FALSE(parked(block, 0, 4242));
  // A slot left by an earlier process of the rank says nothing of this one.
  CHECK_FALSE(reforms(block, 0, 4343));
  v.flags |= control::kFlagParked;
  block.write_slot(0, v);
  CHECK(parked(block, 0, 4242));
  CHECK_FALSE(parked(block, 1, 4242));
  CHECK_FALSE(parked(block, 7, 4242));
  // Its replacement starts from an empty slot.
  block.clear_slot(0);
  CHECK(block.read_slot(0).flags == 0);
  CHECK(block.read_slot(0).step == -1);
}

TEST_CASE("the next round is published file first, then as a reform event; a dismissal keeps "
          "the round",
          "[reform]") {
  test::TempDir dir;
  auto block = control::ControlBlock::create(dir / "control", 1).value();
  block.reset(3);
  REQUIRE(publish_reform(block, 4, 6, {{{"RANK", "2"}}}));
  auto ev = block.read_event();
  CHECK(ev.kind == control::EventKind::reform);
  CHECK(std::string(control::to_string(ev.kind)) == "reform");
  CHECK(ev.generation == 4);
  CHECK(ev.next_world_size == 6);
  CHECK(ev.stop_step == -1);
  CHECK(nlohmann::json::parse(test::slurp(dir / "control.assign"))["generation"] == 4);
  const uint64_t seq = ev.event_seq;
  dismiss_parked(block, "the node leaves");
  ev = block.read_event();
  CHECK(ev.kind == control::EventKind::shutdown);
  CHECK(ev.generation == 4);
  CHECK(ev.reason == "the node leaves");
  CHECK(ev.event_seq == seq + 1);
}

TEST_CASE("no reform event goes out when its file cannot be written", "[reform]") {
  test::TempDir dir;
  auto block = control::ControlBlock::create(dir / "control", 1).value();
  block.reset(5);
  // The file's place is taken by a directory: the rename fails.
  std::filesystem::create_directories(dir.path() / "control.assign" / "x");
  CHECK_FALSE(publish_reform(block, 6, 2, {{}}));
  CHECK(block.read_event().kind == control::EventKind::none);
  CHECK(block.read_event().generation == 5);
}
