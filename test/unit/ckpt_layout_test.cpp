// File names and metadata of a checkpoint directory (src/ckpt/layout,
// docs/checkpoint-format.md): what is written reads back the same, and
// metadata that is not what a writer of this version makes is refused,
// naming the file.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/layout.hpp"
#include "elasticrun/errors.hpp"

namespace ckpt = elasticrun::ckpt;
namespace layout = elasticrun::ckpt::layout;
using nlohmann::json;

namespace {

std::vector<layout::ShardRecord> sample_records() {
  layout::ShardRecord w;
  w.info = {"layer.weight", "float32", 4, {10, 3}, false};
  w.where = {layout::shard_data(2), 0, 4 * 3 * 4, 0xDEADBEEFu, 6, 10};
  layout::ShardRecord lr;
  lr.info = {"lr", "float64", 8, {}, true};
  lr.where = {layout::shard_data(2), 48, 8, 7, 0, 1};
  layout::ShardRecord none;  // a rank may hold no rows of a tensor
  none.info = {"few", "uint8", 1, {2, 5}, false};
  none.where = {layout::shard_data(2), 56, 0, 0, 2, 2};
  return {w, lr, none};
}

// Rank 2's metadata of sample_records() with one field of one record replaced.
std::string meta_with(const std::string& key, const json& value, std::size_t record = 0) {
  json j = json::parse(layout::encode_shard_meta(2, 3, sample_records()));
  if (key == "rank" || key == "world_size" || key == "data" || key == "format" ||
      key == "version") {
    j[key] = value;
  } else {
    j["tensors"][record][key] = value;
  }
  return j.dump();
}

std::string decode_error(const std::string& text) {
  try {
    layout::decode_shard_meta(text, 2, 3, "/ck/step_000000001/shard_00002.json");
  } catch (const elasticrun::Error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("step directories and shard files are named with padded numbers", "[ckpt][layout]") {
  CHECK(layout::step_dir(42) == "step_000000042");
  CHECK(layout::step_dir(12345678901) == "step_12345678901");
  CHECK(layout::shard_data(3) == "shard_00003.bin");
  CHECK(layout::shard_meta(123456) == "shard_123456.json");
}

TEST_CASE("only published step directory names parse, back to their step", "[ckpt][layout]") {
  CHECK(layout::parse_step_dir("step_000000042") == 42);
  CHECK(layout::parse_step_dir(layout::step_dir(12345678901)) == 12345678901);
  for (const char* name : {"step_000000042.partial", "step_42", "step_00000004x", "step_-00000042",
                           "step_+00000042", "latest", "latest.tmp", "Step_000000042", ""}) {
    INFO(name);
    CHECK_FALSE(layout::parse_step_dir(name).has_value());
  }
}

TEST_CASE("shard metadata reads back as written", "[ckpt][layout]") {
  const auto records = sample_records();
  const auto back =
      layout::decode_shard_meta(layout::encode_shard_meta(2, 3, records), 2, 3, "meta");
  REQUIRE(back.size() == records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& a = records[i];
    const auto& b = back[i];
    CHECK(b.info.name == a.info.name);
    CHECK(b.info.dtype == a.info.dtype);
    CHECK(b.info.element_size == a.info.element_size);
    CHECK(b.info.shape == a.info.shape);
    CHECK(b.info.replicated == a.info.replicated);
    CHECK(b.where.file == a.where.file);
    CHECK(b.where.offset == a.where.offset);
    CHECK(b.where.size == a.where.size);
    CHECK(b.where.crc32c == a.where.crc32c);
    CHECK(b.where.row_begin == a.where.row_begin);
    CHECK(b.where.row_end == a.where.row_end);
  }
}

TEST_CASE("the manifest reads back as written, extra JSON included", "[ckpt][layout]") {
  const auto m = layout::decode_manifest(
      layout::encode_manifest(7, 4, R"({"position": 1280, "seeds": [1, 2]})"), "manifest");
  CHECK(m.step == 7);
  CHECK(m.world_size == 4);
  CHECK(json::parse(m.extra_json) == json::parse(R"({"seeds": [1, 2], "position": 1280})"));
  CHECK_THROWS_AS(layout::encode_manifest(7, 4, "{not json"), elasticrun::ConfigError);
}

TEST_CASE("shard metadata of another writer, format or version is refused naming the file",
          "[ckpt][layout]") {
  const std::string file = "/ck/step_000000001/shard_00002.json";
  CHECK_THAT(decode_error(meta_with("rank", 1)),
             Catch::StartsWith(file) && Catch::Contains("written by rank 1 of 3"));
  CHECK_THAT(decode_error(meta_with("world_size", 4)), Catch::Contains("expected rank 2 of 3"));
  CHECK_THAT(decode_error(meta_with("format", "other")),
             Catch::Contains("not an elasticrun checkpoint file"));
  CHECK_THAT(decode_error(meta_with("version", 2)),
             Catch::Contains("format version 2, this build reads version 1"));
  CHECK_THAT(decode_error(meta_with("data", "../../etc/passwd")),
             Catch::Contains("data file \"../../etc/passwd\""));
  CHECK_THAT(decode_error("{\"format\": \"elasticrun-tensor-checkpoint\""),
             Catch::StartsWith(file) && Catch::Contains("unreadable checkpoint metadata"));
  CHECK_THAT(decode_error(""), Catch::Contains("unreadable checkpoint metadata"));
}

TEST_CASE("a record whose numbers do not add up is refused naming the file and the tensor",
          "[ckpt][layout]") {
  const std::vector<std::pair<std::string, json>> bad = {
      {"bytes", 47},                          // 4 rows x 12 bytes is 48
      {"rows", {6, 11}},                      // past the 10 rows of the shape
      {"rows", {-1, 3}},                      //
      {"rows", {7, 6}},                       //
      {"shape", {10, -3}},                    // a negative dimension
      {"shape", {-10, 3}},                    //
      {"element_size", 0},                    //
      {"shape", {10, 1LL << 40, 1LL << 40}},  // bytes past 64 bits
      {"offset", 0xFFFFFFFFFFFFFFF0ULL},      // offset + bytes past 64 bits
      {"name", ""},                           //
  };
  for (const auto& [key, value] : bad) {
    INFO(key << " = " << value.dump());
    CHECK_THAT(decode_error(meta_with(key, value)),
               Catch::StartsWith("/ck/step_000000001/shard_00002.json: tensor '"));
  }
  // Numbers of the wrong type or out of range are not converted into
  // plausible ones; missing fields are refused too.
  CHECK_THAT(decode_error(meta_with("crc32c", "abc")), Catch::Contains("crc32c is \"abc\""));
  CHECK_THAT(decode_error(meta_with("crc32c", 1LL << 33)),
             Catch::Contains("crc32c is 8589934592, not an integer in range"));
  CHECK_THAT(decode_error(meta_with("offset", 1.5)), Catch::Contains("offset is 1.5"));
  CHECK_THAT(decode_error(meta_with("element_size", -4)), Catch::Contains("element_size is -4"));
  CHECK_THAT(decode_error(meta_with("rows", {1, 2, 3})), Catch::Contains("not [begin, end)"));
  json j = json::parse(layout::encode_shard_meta(2, 3, sample_records()));
  j["tensors"][0].erase("dtype");
  CHECK_THAT(decode_error(j.dump()), Catch::Contains("unreadable"));
}

TEST_CASE("a manifest without a sensible step and world size is refused", "[ckpt][layout]") {
  json j = json::parse(layout::encode_manifest(7, 4, "{}"));
  j["world_size"] = 0;
  CHECK_THROWS_WITH(layout::decode_manifest(j.dump(), "m.json"), "m.json: world_size 0");
  j["world_size"] = 1;
  j["step"] = -1;
  CHECK_THROWS_WITH(layout::decode_manifest(j.dump(), "m.json"), "m.json: step -1");
  j.erase("extra");
  CHECK_THROWS_WITH(layout::decode_manifest(j.dump(), "m.json"),
                    Catch::StartsWith("m.json: unreadable checkpoint metadata"));
}
