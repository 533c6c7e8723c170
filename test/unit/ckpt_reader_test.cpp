// Reader against damaged checkpoints: a flipped byte, a truncated or
// missing shard, metadata that disagrees between shards. A load never
// returns bytes other than the ones written, and the error names the file.
#include <barrier>
#include <catch2/catch.hpp>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/checkpoint.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

namespace ckpt = elasticrun::ckpt;
namespace fs = std::filesystem;
using elasticrun::test::TempDir;
using nlohmann::json;

namespace {

constexpr std::int64_t kRows = 8;
constexpr std::size_t kRowBytes = 16;  // 4 float32 per row

// "w" (8 rows of 16 bytes, split over 2 ranks) and "b" (replicated, 16 bytes).
std::vector<std::byte> w_bytes() {
  std::vector<std::byte> out(kRows * kRowBytes);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 3 + 1);
  return out;
}

// Saves step 5 at 2 ranks and returns its directory.
fs::path save_two_ranks(const fs::path& root) {
  const auto w = w_bytes();
  const std::vector<std::byte> b(kRowBytes, std::byte{0x5A});
  std::barrier sync(2);
  std::exception_ptr errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        ckpt::Checkpointer c(root, 1, r, 2, [&] { sync.arrive_and_wait(); });
        const auto [begin, end] = ckpt::even_rows(kRows, r, 2);
        const std::vector<ckpt::ShardView> shards = {
            {{"w", "float32", 4, {kRows, 4}, false},
             begin,
             end,
             std::span(w).subspan(static_cast<std::size_t>(begin) * kRowBytes,
                                  static_cast<std::size_t>(end - begin) * kRowBytes)},
            {{"b", "float32", 4, {4}, true}, 0, 4, std::span(b)}};
        c.save(5, shards);
      } catch (...) {
        errors[r] = std::current_exception();
        sync.arrive_and_drop();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return root / "step_000000005";
}

std::vector<std::byte> read_w(const ckpt::Reader& reader, std::int64_t begin, std::int64_t end) {
  std::vector<std::byte> out(static_cast<std::size_t>(end - begin) * kRowBytes);
  reader.read_rows("w", begin, end, out);
  return out;
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get() ^ 0x01);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const elasticrun::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a flipped byte is detected naming the file, bytes, rows and both checksums",
          "[ckpt][reader]") {
  TempDir dir;
  const fs::path ck = save_two_ranks(dir.path());
  // Rank 1's data file holds only its rows of w, [4, 8): bytes [0, 64).
  flip_byte(ck / "shard_00001.bin", 20);
  const ckpt::Reader reader(ck);  // metadata only: opening still works
  const std::string error = error_of([&] { read_w(reader, 5, 6); });
  CHECK_THAT(error, Catch::StartsWith("checkpoint: " + (ck / "shard_00001.bin").string()) &&
                        Catch::Contains("bytes [0, 64) (rows [4, 8))") &&
                        Catch::Matches(".*CRC32C 0x[0-9a-f]{8}, expected 0x[0-9a-f]{8}.*") &&
                        Catch::Contains("the shard is corrupt"));
  CHECK_THAT(error_of([&] { reader.verify(); }), Catch::Contains("shard_00001.bin"));
  // Rows only rank 0's record holds never touch the damaged file.
  const auto w = w_bytes();
  CHECK(read_w(reader, 0, 4) == std::vector<std::byte>(w.begin(), w.begin() + 4 * kRowBytes));
}

TEST_CASE("a damaged replicated tensor is detected too", "[ckpt][reader]") {
  TempDir dir;
  const fs::path ck = save_two_ranks(dir.path());
  // Rank 0 wrote w's rows [0, 4) (64 bytes), then b.
  flip_byte(ck / "shard_00000.bin", 64 + 3);
  const ckpt::Reader reader(ck);
  std::vector<std::byte> b(kRowBytes);  // all 4 rows of 4 bytes
  CHECK_THAT(error_of([&] { reader.read_rows("b", 0, 4, b); }),
             Catch::Contains("shard_00000.bin: bytes [64, 80)"));
}

TEST_CASE("a truncated shard is detected naming the file and where it ends", "[ckpt][reader]") {
  TempDir dir;
  const fs::path ck = save_two_ranks(dir.path());
  fs::resize_file(ck / "shard_00001.bin", 50);
  const ckpt::Reader reader(ck);
  CHECK_THAT(error_of([&] { read_w(reader, 4, 8); }),
             Catch::Contains((ck / "shard_00001.bin").string()) &&
                 Catch::Contains("the file ends at byte 50, before byte 64"));
  CHECK_THAT(error_of([&] { reader.verify(); }), Catch::Contains("shard_00001.bin"));
}

TEST_CASE("a missing shard file is an error naming it", "[ckpt][reader]") {
  TempDir dir;
  const fs::path ck = save_two_ranks(dir.path());
  fs::remove(ck / "shard_00001.json");
  CHECK_THAT(error_of([&] { ckpt::Reader reader(ck); }),
             Catch::Contains((ck / "shard_00001.json").string()) &&
                 Catch::Contains("No such file or directory"));
  const fs::path ck2 = save_two_ranks(dir.path() / "again");
  fs::remove(ck2 / "shard_00000.bin");
  const ckpt::Reader reader(ck2);
  CHECK_THAT(error_of([&] { read_w(reader, 0, 1); }), Catch::Contains("shard_00000.bin"));
}

TEST_CASE("shards that disagree about a tensor's dtype are refused at open", "[ckpt][reader]") {
  TempDir dir;
  const fs::path ck = save_two_ranks(dir.path());
  const fs::path meta = ck / "shard_00001.json";
  json j = read_json(meta);
  j["tensors"][0]["dtype"] = "int32";  // the same size, so the file alone adds up
  std::ofstream(meta) << j.dump();
  CHECK_THAT(error_of([&] { ckpt::Reader reader(ck); }),
             Catch::Contains(meta.string()) &&
                 Catch::Contains("tensor 'w' has another dtype or shape than in the shards"));
}

TEST_CASE("rows no shard holds are an error naming them", "[ckpt][reader]") {
  TempDir dir;
  const fs::path ck = save_two_ranks(dir.path());
  const fs::path meta = ck / "shard_00001.json";
  json j = read_json(meta);
  j["tensors"] = json::array();  // rank 1 held nothing of w: rows [4, 8) are in no shard
  std::ofstream(meta) << j.dump();
  const ckpt::Reader reader(ck);
  CHECK(read_w(reader, 0, 4).size() == 4 * kRowBytes);
  CHECK_THAT(error_of([&] { read_w(reader, 2, 8); }),
             Catch::Contains("no shard holds rows [4, 8) of tensor 'w'"));
}
