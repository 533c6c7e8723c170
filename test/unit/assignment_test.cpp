// The next round's assignment for parked workers (control/assignment): made
// by the agent, read by the C++ SDK.
#include "control/assignment.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "process_helpers.hpp"
#include "temp_dir.hpp"

using namespace elasticrun;
using namespace elasticrun::control;

TEST_CASE("a rank's assignment holds what differs from the agent's environment", "[assignment]") {
  const RankEnv base = {{"PATH", "/bin"}, {"RANK", "3"}, {"HOME", "/root"}};
  const RankEnv env = {{"PATH", "/bin"}, {"RANK", "1"}, {"HOME", "/root"}, {"WORLD_SIZE", "2"}};
  CHECK(changed_from(base, env) == RankEnv{{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  CHECK(changed_from(env, env).empty());
}

TEST_CASE(
    "the assignment file is versioned JSON with one environment per local rank, replaced "
    "whole",
    "[assignment]") {
  test::TempDir dir;
  const std::string path = assignment_path(dir / "control");
  CHECK(path == dir / "control.assign");
  const std::vector<RankEnv> ranks = {{{"RANK", "4"}, {"MASTER_PORT", "29501"}},
                                      {{"RANK", "5"}, {"MASTER_PORT", "29501"}}};
  REQUIRE(write_assignment(path, 7, ranks));
  auto doc = nlohmann::json::parse(test::slurp(path));
  CHECK(doc["version"] == kAssignmentVersion);
  CHECK(doc["generation"] == 7);
  REQUIRE(doc["ranks"].size() == 2);
  CHECK(doc["ranks"][1]["RANK"] == "5");
  // A second round's file replaces the first; no temporary is left.
  REQUIRE(write_assignment(path, 8, {{{"RANK", "0"}}}));
  doc = nlohmann::json::parse(test::slurp(path));
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

TEST_CASE("a rank's place is read back from the file the agent wrote", "[assignment]") {
  test::TempDir dir;
  const std::string path = assignment_path(dir / "control");
  REQUIRE(write_assignment(path, 3, {{{"RANK", "0"}}, {{"RANK", "1"}, {"WORLD_SIZE", "4"}}}));
  auto env = read_assignment(path, 3, 1);
  REQUIRE(env);
  CHECK(env.value() == RankEnv{{"RANK", "1"}, {"WORLD_SIZE", "4"}});
  // Fields a reader does not know are no error.
  auto extra =
      parse_assignment(R"({"version":1,"generation":2,"ranks":[{"A":"b"}],"new":[1]})", 2, 0);
  REQUIRE(extra);
  CHECK(extra.value() == RankEnv{{"A", "b"}});
}

TEST_CASE(
    "an assignment for another round, version or rank, or not one at all, is refused with "
    "the reason",
    "[assignment]") {
  const std::string good = R"({"version":1,"generation":5,"ranks":[{"RANK":"0"}]})";
  REQUIRE(parse_assignment(good, 5, 0));
  const auto why = [](const std::string& text, uint64_t gen, int lr) {
    auto r = parse_assignment(text, gen, lr);
    REQUIRE_FALSE(r);
    return r.status().context();
  };
  CHECK(why(good, 6, 0) == "round 5, expected 6");
  CHECK(why(good, 5, 1) == "no entry for local rank 1");
  CHECK(why(good, 5, -1) == "no entry for local rank -1");
  CHECK(why(R"({"version":2,"generation":5,"ranks":[]})", 5, 0) ==
        "version 2, this reader reads 1");
  CHECK(why(R"({"generation":5,"ranks":[]})", 5, 0) == "version missing, this reader reads 1");
  CHECK(why(R"({"version":1,"generation":5,"ranks":[{"RANK":0}]})", 5, 0) == "RANK: not a string");
  CHECK(why("{\"version\":1, cut", 5, 0) == "not a JSON object");
  CHECK(why("[]", 5, 0) == "not a JSON object");
  test::TempDir dir;
  auto missing = read_assignment(dir / "none.assign", 5, 0);
  REQUIRE_FALSE(missing);
  CHECK(missing.status().context().find("none.assign") != std::string::npos);
}
