// Checkpointer and Reader on the machine's file system: a checkpoint saved
// by N ranks (threads, with a real barrier) reads back at any M, any rows,
// bit for bit; retention keeps the last K; a .partial is never loaded.
#include <algorithm>
#include <barrier>
#include <catch2/catch.hpp>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "elasticrun/checkpoint.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

namespace ckpt = elasticrun::ckpt;
namespace fs = std::filesystem;
using elasticrun::test::TempDir;

namespace {

// The tensors of a training step: every byte depends on the step, the
// tensor and its position, so a byte from another step, tensor or row is
// told apart.
struct Tensor {
  ckpt::TensorInfo info;
  std::vector<std::byte> bytes;  // all rows, C-contiguous
};

std::vector<Tensor> model(std::int64_t step) {
  std::vector<Tensor> out = {
      {{"layer.weight", "float32", 4, {13, 3}, false}, {}},
      {{"embedding", "int64", 8, {7}, false}, {}},
      {{"few", "uint8", 1, {2, 5}, false}, {}},  // fewer rows than some worlds have ranks
      {{"empty", "float16", 2, {0, 4}, false}, {}},
      {{"bias", "float32", 4, {3}, true}, {}},
      {{"lr", "float64", 8, {}, true}, {}},  // a scalar
  };
  for (std::size_t t = 0; t < out.size(); ++t) {
    auto& tensor = out[t];
    tensor.bytes.resize(static_cast<std::size_t>(tensor.info.rows()) * tensor.info.row_bytes());
    for (std::size_t i = 0; i < tensor.bytes.size(); ++i) {
      tensor.bytes[i] = static_cast<std::byte>(
          (step * 131 + static_cast<std::int64_t>(t) * 29 + static_cast<std::int64_t>(i) * 7) %
          251);
    }
  }
  return out;
}

// What rank `rank` of `world` passes to save: its even rows of each sharded
// tensor, all of each replicated one.
std::vector<ckpt::ShardView> shards_of(const std::vector<Tensor>& tensors, int rank, int world) {
  std::vector<ckpt::ShardView> out;
  for (const auto& t : tensors) {
    auto [begin, end] = t.info.replicated ? std::pair<std::int64_t, std::int64_t>{0, t.info.rows()}
                                          : ckpt::even_rows(t.info.rows(), rank, world);
    const std::size_t row = t.info.row_bytes();
    out.push_back({t.info, begin, end,
                   std::span(t.bytes).subspan(static_cast<std::size_t>(begin) * row,
                                              static_cast<std::size_t>(end - begin) * row)});
  }
  return out;
}

// Saves `step` at `world` ranks, one thread each, as a job would.
void save_at(const fs::path& root, int keep, int world, std::int64_t step,
             const std::string& extra = "{}") {
  const auto tensors = model(step);
  std::barrier sync(world);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        ckpt::Checkpointer c(root, keep, r, world, [&] { sync.arrive_and_wait(); });
        c.save(step, shards_of(tensors, r, world), extra);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        sync.arrive_and_drop();  // the others must not wait for this rank
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::vector<std::byte> read(const ckpt::Reader& reader, const std::string& name, std::int64_t begin,
                            std::int64_t end) {
  std::vector<std::byte> out(static_cast<std::size_t>(end - begin) *
                             reader.tensor(name).row_bytes());
  reader.read_rows(name, begin, end, out);
  return out;
}

std::vector<std::byte> rows_of(const Tensor& t, std::int64_t begin, std::int64_t end) {
  const std::size_t row = t.info.row_bytes();
  return {t.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(begin) * row),
          t.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(end) * row)};
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a checkpoint saved at N ranks reads back at any M ranks bit for bit",
          "[ckpt][checkpointer]") {
  for (int n : {1, 2, 3, 5}) {
    TempDir dir;
    const fs::path root = dir.path() / "ckpt";
    save_at(root, 2, n, 42, R"({"position": 1280})");
    const auto dir42 = ckpt::latest(root);
    REQUIRE(dir42 == root / "step_000000042");
    const ckpt::Reader reader(*dir42);
    CHECK(reader.step() == 42);
    CHECK(reader.world_size() == n);
    CHECK(reader.extra_json() == R"({"position":1280})");
    reader.verify();
    const auto tensors = model(42);
    REQUIRE(reader.tensors().size() == tensors.size());
    for (int m : {1, 2, 3, 4, 7}) {
      for (const auto& t : tensors) {
        const ckpt::TensorInfo& info = reader.tensor(t.info.name);
        CHECK(info.shape == t.info.shape);
        CHECK(info.dtype == t.info.dtype);
        CHECK(info.replicated == t.info.replicated);
        for (int rank = 0; rank < m; ++rank) {
          const auto [begin, end] = ckpt::even_rows(info.rows(), rank, m);
          INFO("saved at " << n << ", " << t.info.name << " read by rank " << rank << " of " << m);
          CHECK(read(reader, t.info.name, begin, end) == rows_of(t, begin, end));
        }
      }
    }
  }
}

TEST_CASE("any row range reads the bytes of those rows, across shard boundaries",
          "[ckpt][checkpointer]") {
  TempDir dir;
  save_at(dir.path(), 1, 3, 7);
  const ckpt::Reader reader(*ckpt::latest(dir.path()));
  std::mt19937 rng(1);
  for (const auto& t : model(7)) {
    const std::int64_t rows = t.info.rows();
    for (int i = 0; i < 40; ++i) {
      std::int64_t begin = std::uniform_int_distribution<std::int64_t>(0, rows)(rng);
      std::int64_t end = std::uniform_int_distribution<std::int64_t>(0, rows)(rng);
      if (begin > end) std::swap(begin, end);
      INFO(t.info.name << " rows [" << begin << ", " << end << ")");
      CHECK(read(reader, t.info.name, begin, end) == rows_of(t, begin, end));
    }
  }
  CHECK_THROWS_AS(read(reader, "layer.weight", 5, 14), elasticrun::ConfigError);
  CHECK_THROWS_WITH(reader.tensor("nope"), Catch::Contains("has no tensor 'nope'"));
}

TEST_CASE("only the last K checkpoints are kept, and the one latest names is always among them",
          "[ckpt][checkpointer]") {
  TempDir dir;
  const fs::path root = dir.path();
  for (std::int64_t step = 1; step <= 5; ++step) save_at(root, 2, 2, step * 10);
  CHECK(names_in(root) == std::vector<std::string>{"latest", "step_000000040", "step_000000050"});
  CHECK(ckpt::published(root) ==
        std::vector<fs::path>{root / "step_000000040", root / "step_000000050"});

  // A job resumed from step 40 saves a lower step than the newest: latest
  // names it, and retention never removes the checkpoint latest names.
  fs::rename(root / "latest", root / "latest.old");
  std::ofstream(root / "latest") << "step_000000040\n";
  save_at(root, 1, 2, 45);
  CHECK(ckpt::latest(root) == root / "step_000000045");
  CHECK(names_in(root) ==
        std::vector<std::string>{"latest", "latest.old", "step_000000045", "step_000000050"});
}

TEST_CASE("a .partial directory is never loaded, and the next save removes it",
          "[ckpt][checkpointer]") {
  TempDir dir;
  const fs::path root = dir.path();
  save_at(root, 3, 2, 10);
  // A whole checkpoint under a .partial name: what a crash before the
  // rename leaves.
  TempDir other;
  save_at(other.path(), 3, 2, 20);
  fs::rename(other.path() / "step_000000020", root / "step_000000020.partial");
  fs::create_directory(root / "step_000000030.partial");
  CHECK(ckpt::latest(root) == root / "step_000000010");
  CHECK(ckpt::published(root) == std::vector<fs::path>{root / "step_000000010"});

  save_at(root, 3, 1, 11);
  CHECK(names_in(root) == std::vector<std::string>{"latest", "step_000000010", "step_000000011"});
}

TEST_CASE("before the first save there is no latest; a latest naming nothing is an error",
          "[ckpt][checkpointer]") {
  TempDir dir;
  CHECK_FALSE(ckpt::latest(dir.path()).has_value());
  CHECK(ckpt::published(dir.path() / "absent").empty());
  std::ofstream(dir.path() / "latest") << "step_000000009\n";
  CHECK_THROWS_WITH(ckpt::latest(dir.path()),
                    Catch::Contains("names 'step_000000009', which is not a checkpoint directory"));
}

TEST_CASE("the same step saved again replaces the checkpoint whole, at another world size",
          "[ckpt][checkpointer]") {
  TempDir dir;
  save_at(dir.path(), 2, 3, 8, R"({"try": 1})");
  save_at(dir.path(), 2, 2, 8, R"({"try": 2})");
  const ckpt::Reader reader(*ckpt::latest(dir.path()));
  CHECK(reader.world_size() == 2);
  CHECK(reader.extra_json() == R"({"try":2})");
  reader.verify();
  CHECK(names_in(reader.dir()) == std::vector<std::string>{"checkpoint.json", "shard_00000.bin",
                                                           "shard_00000.json", "shard_00001.bin",
                                                           "shard_00001.json"});
  CHECK(names_in(dir.path()) == std::vector<std::string>{"latest", "step_000000008"});
}

TEST_CASE("a save with bad arguments is refused before anything is written",
          "[ckpt][checkpointer]") {
  TempDir dir;
  const fs::path root = dir.path() / "ckpt";
  CHECK_THROWS_AS(ckpt::Checkpointer(root, 0, 0, 1, {}), elasticrun::ConfigError);
  CHECK_THROWS_AS(ckpt::Checkpointer(root, 1, 2, 2, [] {}), elasticrun::ConfigError);
  CHECK_THROWS_WITH(ckpt::Checkpointer(root, 1, 0, 2, {}),
                    Catch::Contains("a world of several ranks needs a barrier"));
  ckpt::Checkpointer c(root, 1, 0, 1, {});
  const auto tensors = model(1);
  auto shards = shards_of(tensors, 0, 1);
  CHECK_THROWS_AS(c.save(-1, shards), elasticrun::ConfigError);
  shards[0].bytes = shards[0].bytes.first(4);
  CHECK_THROWS_WITH(c.save(1, shards), Catch::Contains("4 bytes for 13 rows of 12 bytes"));
  shards = shards_of(tensors, 0, 1);
  shards[4].row_end = 2;  // a replicated tensor holds all its rows
  CHECK_THROWS_WITH(c.save(1, shards), Catch::Contains("a replicated tensor holds all its rows"));
  CHECK_THROWS_AS(c.save(1, shards_of(tensors, 0, 1), "{not json"), elasticrun::ConfigError);
  CHECK_FALSE(fs::exists(root));
}

TEST_CASE("even rows split rows as evenly as possible, the first ranks taking one more",
          "[ckpt][checkpointer]") {
  CHECK(ckpt::even_rows(10, 0, 3) == std::pair<std::int64_t, std::int64_t>{0, 4});
  CHECK(ckpt::even_rows(10, 1, 3) == std::pair<std::int64_t, std::int64_t>{4, 7});
  CHECK(ckpt::even_rows(10, 2, 3) == std::pair<std::int64_t, std::int64_t>{7, 10});
  CHECK(ckpt::even_rows(2, 3, 5) == std::pair<std::int64_t, std::int64_t>{2, 2});
  CHECK_THROWS_AS(ckpt::even_rows(10, 3, 3), elasticrun::ConfigError);
}
