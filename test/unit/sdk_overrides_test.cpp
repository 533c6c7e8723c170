// load_overrides (include/elasticrun/batch.hpp): worldSizeOverrides of the job
// config file, read with the agent's parser. The integration suite compares
// it with the Python SDK's reader over the same files.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>

#include "elasticrun/batch.hpp"
#include "elasticrun/errors.hpp"
#include "temp_dir.hpp"

namespace sdk = elasticrun::sdk;
using elasticrun::test::TempDir;

namespace {

std::string write(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "job.yaml";
  std::ofstream(path) << text;
  return path;
}

// Sets $ELASTICRUN_CONFIG_FILE (nullopt: unsets it) for one test.
class ConfigEnv {
 public:
  explicit ConfigEnv(const std::optional<std::string>& value) {
    if (const char* old = ::getenv(sdk::kConfigFileEnv)) saved_ = old;
    if (value) {
      ::setenv(sdk::kConfigFileEnv, value->c_str(), 1);
    } else {
      ::unsetenv(sdk::kConfigFileEnv);
    }
  }
  ~ConfigEnv() {
    if (saved_) {
      ::setenv(sdk::kConfigFileEnv, saved_->c_str(), 1);
    } else {
      ::unsetenv(sdk::kConfigFileEnv);
    }
  }
  ConfigEnv(const ConfigEnv&) = delete;
  ConfigEnv& operator=(const ConfigEnv&) = delete;

 private:
  std::optional<std::string> saved_;
};

constexpr const char* kDocsExample = R"(# job.yaml: grow from 2 to 8 nodes, at 2, 4 or 8 only.
elasticPolicy:
  minReplicas: 2
  maxReplicas: 8
  replicaDiscreteValues: [2, 4, 8]     # or replicaIncrementStep: 2

worldSizeOverrides:
  2: {learningRate: 1.0e-4, microBatchSize: 32}
  4: {learningRate: 2.0e-4, microBatchSize: 16}
  8:
    learningRate: 4.0e-4
    microBatchSize: 8
)";

}  // namespace

TEST_CASE("the example of the docs reads as numbers per node count", "[sdk][overrides]") {
  TempDir dir;
  const sdk::Overrides overrides = sdk::load_overrides(write(dir, kDocsExample));
  REQUIRE(overrides.size() == 3);
  CHECK(overrides.at(2) == sdk::Override{.learning_rate = 1.0e-4, .micro_batch_size = 32});
  CHECK(overrides.at(4) == sdk::Override{.learning_rate = 2.0e-4, .micro_batch_size = 16});
  CHECK(overrides.at(8) == sdk::Override{.learning_rate = 4.0e-4, .micro_batch_size = 8});
}

TEST_CASE("an entry holds only the keys the file gives, numbers as Python reads them",
          "[sdk][overrides]") {
  TempDir dir;
  const auto overrides = sdk::load_overrides(write(dir, R"(worldSizeOverrides:
  3: {learningRate: 1e-4}
  5: {microBatchSize: +6}
  08: {learningRate: -0.0}
  9: {}
)"));
  REQUIRE(overrides.size() == 4);
  CHECK(overrides.at(3) == sdk::Override{.learning_rate = 1e-4});
  CHECK(overrides.at(5) == sdk::Override{.micro_batch_size = 6});
  CHECK(overrides.at(8).learning_rate == 0.0);
  CHECK(std::signbit(*overrides.at(8).learning_rate));  // Python's float("-0.0")
  CHECK(overrides.at(9) == sdk::Override{});
}

TEST_CASE("a micro-batch range reads as its bounds, with comments after the entries",
          "[sdk][overrides]") {
  TempDir dir;
  const auto overrides = sdk::load_overrides(write(dir, R"(worldSizeOverrides:
  2: {maxMicroBatchSize: 6}  # 2 ranks x 6, 4 accumulation steps
  3:
    minMicroBatchSize: 2
    maxMicroBatchSize: 4
    learningRate: 0.1
)"));
  REQUIRE(overrides.size() == 2);
  CHECK(overrides.at(2) == sdk::Override{.max_micro_batch_size = 6});
  CHECK(overrides.at(3) ==
        sdk::Override{.learning_rate = 0.1, .min_micro_batch_size = 2, .max_micro_batch_size = 4});
}

TEST_CASE("a file without the section, or an empty one, has no overrides", "[sdk][overrides]") {
  TempDir dir;
  for (const char* text : {"", "elasticPolicy:\n  minReplicas: 2\n", "worldSizeOverrides:\n",
                           "worldSizeOverrides: {}\n", "# only a comment\n---\n"}) {
    INFO(text);
    CHECK(sdk::load_overrides(write(dir, text)).empty());
  }
}

TEST_CASE("the file the agent names is read by default, and no file means no overrides",
          "[sdk][overrides]") {
  TempDir dir;
  const std::string path = write(dir, kDocsExample);
  {
    ConfigEnv env(path);
    CHECK(sdk::load_overrides().at(4).micro_batch_size == 16);
  }
  {
    ConfigEnv env(std::nullopt);
    CHECK(sdk::load_overrides().empty());
  }
  {
    ConfigEnv env("");  // empty is unset, as in Python
    CHECK(sdk::load_overrides().empty());
  }
  ConfigEnv env(dir / "gone.yaml");
  CHECK_THROWS_WITH(sdk::load_overrides(),
                    Catch::Contains("gone.yaml") && Catch::Contains("$ELASTICRUN_CONFIG_FILE") &&
                        Catch::Contains("cannot open: No such file or directory"));
}

TEST_CASE("a section elasticrun refuses is refused with the file and the line",
          "[sdk][overrides]") {
  TempDir dir;
  const auto refused = [&](const std::string& body) {
    const std::string path = write(dir, "worldSizeOverrides:\n" + body + "\n");
    try {
      sdk::load_overrides(path);
    } catch (const elasticrun::ConfigError& e) {
      CHECK_THAT(e.what(), Catch::Contains(path));
      return std::string(e.what());
    }
    FAIL("accepted: " << body);
    return std::string();
  };
  CHECK_THAT(refused("  4: {learningRate: 1, batch: 2}"),
             Catch::Contains("line 2") && Catch::Contains("unknown key 'batch'"));
  CHECK_THAT(refused("  4: {microBatchSize: \"8\"}"), Catch::Contains("expected an integer"));
  CHECK_THAT(refused("  4: {microBatchSize: 4.5}"), Catch::Contains("expected an integer"));
  CHECK_THAT(refused("  4: {microBatchSize: 0}"), Catch::Contains("must be at least 1"));
  CHECK_THAT(refused("  4: {learningRate: -0.1}"), Catch::Contains("must not be negative"));
  CHECK_THAT(refused("  4: {learningRate: .inf}"), Catch::Contains("expected a number"));
  CHECK_THAT(refused("  0: {learningRate: 1}"), Catch::Contains("at least 1 node"));
  CHECK_THAT(refused("  8: {learningRate: 1}\n  08: {learningRate: 2}"),
             Catch::Contains("line 3") && Catch::Contains("world size 8 is given twice"));
  CHECK_THAT(refused("  8:"), Catch::Contains("expected a mapping"));
  CHECK_THAT(refused("  8: {learningRate: 1"), Catch::Contains("not valid YAML"));
  CHECK_THAT(refused("  4: {microBatchSize: 4, maxMicroBatchSize: 8}"),
             Catch::Contains("line 2") && Catch::Contains("not both"));
  CHECK_THAT(refused("  4: {minMicroBatchSize: 2}"),
             Catch::Contains("a range needs maxMicroBatchSize"));
  CHECK_THAT(refused("  4: {minMicroBatchSize: 3, maxMicroBatchSize: 2}"),
             Catch::Contains("minimum 3 is above its maximum 2"));
}

TEST_CASE("a file over one mebibyte is refused", "[sdk][overrides]") {
  TempDir dir;
  const std::string path = write(dir, "# " + std::string(1 << 20, 'x') + "\n");
  CHECK_THROWS_WITH(sdk::load_overrides(path), Catch::Contains("larger than 1048576 bytes"));
}
