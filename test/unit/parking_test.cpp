// --inprocess-restart's agent side: the assignment file parked workers read
// (agent/reform) and the control block's parking flags and events
// (agent/parking).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/parking.hpp"
#include "agent/reform.hpp"
#include "temp_dir.hpp"

using namespace elasticrun;
using namespace elasticrun::agent;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a rank's assignment holds what differs from the agent's environment", "[reform]") {
  const RankEnv base = {{"PATH", "/bin"}, {"RANK", "3"}, {"HOME", "/root"}};
  const RankEnv env = {{"PATH", "/bin"}, {"RANK", "1"}, {"HOME", "/root"}, {"WORLD_SIZE", "2"}};
  CHECK(changed_from(base, env) == RankEnv{{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  CHECK(changed_from(env, env).empty());
}

TEST_CASE("the assignment file is versioned JSON with one environment per local rank, replaced "
          "whole",
          "[reform]") {
  test::TempDir dir;
  const std::string path = assignment_path(dir / "control");
  CHECK(path == dir / "control.assign");
  const std::vector<RankEnv> ranks = {{{"RANK", "4"}, {"MASTER_PORT", "29501"}},
                                      {{"RANK", "5"}, {"MASTER_PORT", "29501"}}};
  REQUIRE(write_assignment(path, 7, ranks));
  auto doc = nlohmann::json::parse(slurp(path));
  CHECK(doc["version"] == kAssignmentVersion);
  CHECK(doc["generation"] == 7);
  REQUIRE(doc["ranks"].size() == 2);
  CHECK(doc["ranks"][1]["RANK"] == "5");
  // A second round's file replaces the first; no temporary is left.
  REQUIRE(write_assignment(path, 8, {{{"RANK", "0"}}}));
  doc = nlohmann::json::parse(slurp(path));
  CHECK(doc["generation"] == 8);
  CHECK(doc["ranks"].size() == 1);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // A value that is not UTF-8 does not stop the round.
  CHECK(nlohmann::json::parse(format_assignment(1, {{{"X", "\xff"}}}))["ranks"][0]["X"] ==
        "\xEF\xBF\xBD");
  // An unwritable place is an error naming it, not a throw.
  const auto st = write_assignment(dir / "missing/control.assign", 1, ranks);
  CHECK_FALSE(st);
  CHECK(st.message().find("missing/control.assign") != std::string::npos);
}

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
  CHECK(nlohmann::json::parse(slurp(dir / "control.assign"))["generation"] == 4);
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
