// The C++ batch planner (include/elasticrun/batch.hpp). The integration
// suite checks it plans exactly as the Python SDK over random inputs; these
// are the documented examples and the refusals.
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "elasticrun/batch.hpp"

namespace sdk = elasticrun::sdk;

TEST_CASE("128 on 24 ranks from sizes 5 and 6 is 8 ranks x 6 and 16 ranks x 5 in one step",
          "[sdk][batch]") {
  const sdk::BatchPlan plan = sdk::plan_batches(128, 24, {6, 5});
  CHECK(plan.accum_steps == 1);
  CHECK(plan.world_size() == 24);
  CHECK(plan.micro_batch(0) == 6);
  CHECK(plan.micro_batch(7) == 6);
  CHECK(plan.micro_batch(8) == 5);
  CHECK(std::accumulate(plan.micro_batches.begin(), plan.micro_batches.end(), int64_t{0}) == 128);
  CHECK(plan.describe() ==
        "global batch 128 on 24 ranks = 8 ranks x 6 + 16 ranks x 5, 1 accumulation step");
}

TEST_CASE("sizes with gaps may need three sizes, larger ones on lower ranks", "[sdk][batch]") {
  const sdk::BatchPlan plan = sdk::plan_batches(17, 3, {4, 6, 7});
  CHECK(plan.micro_batches == std::vector<int64_t>{7, 6, 4});
  CHECK(plan.accum_steps == 1);
}

TEST_CASE("a batch too large for one step accumulates the fewest steps", "[sdk][batch]") {
  const sdk::BatchPlan plan = sdk::plan_batches(256, 4, {8});
  CHECK(plan.accum_steps == 8);
  CHECK(plan.local_batches() == std::vector<int64_t>{64, 64, 64, 64});
  CHECK(plan.local_batch(3) == 64);
  CHECK(plan.describe() == "global batch 256 on 4 ranks = 4 ranks x 8, 8 accumulation steps");
}

TEST_CASE("no plan is refused saying why, and bad arguments name themselves", "[sdk][batch]") {
  CHECK_THROWS_WITH(sdk::plan_batches(128, 200, {1}),
                    Catch::Contains("200 ranks at the smallest micro-batch (1) already take 200"));
  CHECK_THROWS_WITH(sdk::plan_batches(97, 8, {4}, 3),
                    Catch::Contains("no common accumulation count k divides 97"));
  CHECK_THROWS_WITH(sdk::plan_batches(0, 8, {4}), "global_batch must be at least 1, got 0");
  CHECK_THROWS_WITH(sdk::plan_batches(8, 2, {}), "micro_batch_sizes is empty");
  CHECK_THROWS_AS(sdk::plan_batches(8, 2, {0}), elasticrun::ConfigError);
  CHECK_THROWS_WITH(sdk::plan_batches(8, 2, {4}).micro_batch(2),
                    "rank 2 is outside a world of 2 ranks");
}

TEST_CASE("admissible world sizes are the candidates with a plan, sorted once each",
          "[sdk][batch]") {
  CHECK(sdk::admissible_world_sizes(128, {8}, {16, 4, 8, 3, 8, 32}) ==
        std::vector<int64_t>{4, 8, 16});
}

TEST_CASE("the discrete-values flag lists the node counts that admit the batch", "[sdk][batch]") {
  // The example of docs/sdk-python.md: 4 ranks per node at micro-batch 8 fit
  // 128 on 1, 2 and 4 nodes; 3 nodes (12 ranks) cannot split it evenly.
  CHECK(sdk::discrete_values_flag(128, {8}, 4, {1, 2, 3, 4, 5, 6, 7, 8}) ==
        "--replica-discrete-values 1,2,4");
  // Any order and repeats: sorted, once each.
  CHECK(sdk::discrete_values_flag(128, {8}, 4, {4, 1, 4, 2}) == "--replica-discrete-values 1,2,4");
}

TEST_CASE("an override's micro-batch replaces the sizes at its node count only", "[sdk][batch]") {
  sdk::Overrides overrides;
  overrides[8].micro_batch_size = 4;  // 32 ranks x 4 = 128
  overrides[8].learning_rate = 0.1;   // ignored by the flag
  overrides[2].learning_rate = 0.5;   // no micro-batch: the default sizes
  CHECK(sdk::discrete_values_flag(128, {8}, 4, {1, 2, 3, 4, 5, 6, 7, 8}, 64, overrides) ==
        "--replica-discrete-values 1,2,4,8");
  overrides[1].micro_batch_size = 5;  // 4 ranks x 5: 20 a step, and 128 is no multiple of 20
  CHECK(sdk::discrete_values_flag(128, {8}, 4, {1, 2, 4}, 64, overrides) ==
        "--replica-discrete-values 2,4");
}

TEST_CASE("an override's range replaces the sizes at its node count and admits uneven splits",
          "[sdk][batch]") {
  sdk::Overrides overrides;
  // 3 nodes are 12 ranks: 12 x 8 x k is never 128, but 64 = 4 ranks x 6 +
  // 8 ranks x 5 in 2 steps is, from the sizes up to 8.
  overrides[3].max_micro_batch_size = 8;
  overrides[2].max_micro_batch_size = 2;  // 8 ranks x 2 x 8 steps
  CHECK(sdk::discrete_values_flag(128, {8}, 4, {1, 2, 3, 4, 5, 6, 7, 8}, 64, overrides) ==
        "--replica-discrete-values 1,2,3,4");
  CHECK(sdk::discrete_values_flag(128, {8}, 4, {1, 2, 3, 4, 5, 6, 7, 8}, 4, overrides) ==
        "--replica-discrete-values 1,3,4");
}

TEST_CASE("an override gives one size, a range, or else the default sizes", "[sdk][batch]") {
  const std::vector<int64_t> fallback{4, 6, 8};
  sdk::Override o;
  CHECK(sdk::micro_batch_sizes(o, fallback) == fallback);
  o.learning_rate = 0.1;
  CHECK(sdk::micro_batch_sizes(o, fallback) == fallback);
  o.max_micro_batch_size = 3;
  CHECK(sdk::micro_batch_sizes(o, fallback) == std::vector<int64_t>{1, 2, 3});
  o.min_micro_batch_size = 2;
  CHECK(sdk::micro_batch_sizes(o, fallback) == std::vector<int64_t>{2, 3});
  // What elasticctl plan writes for 3 nodes of 8 GPUs at a global batch of
  // 256 when 4 sequences fit: no common micro-batch makes 256 over 24 ranks.
  const sdk::BatchPlan plan = sdk::plan_batches(
      256, 24, sdk::micro_batch_sizes(sdk::Override{.max_micro_batch_size = 4}, {8}));
  std::vector<int64_t> want(16, 3);
  want.resize(24, 2);
  CHECK(plan.micro_batches == want);
  CHECK(plan.accum_steps == 4);
  CHECK(sdk::micro_batch_sizes(sdk::Override{.micro_batch_size = 5}, fallback) ==
        std::vector<int64_t>{5});
}

TEST_CASE("an override load_overrides would refuse is refused by micro_batch_sizes, as in Python",
          "[sdk][batch]") {
  CHECK_THROWS_WITH(
      sdk::micro_batch_sizes(sdk::Override{.micro_batch_size = 4, .max_micro_batch_size = 8}, {8}),
      Catch::EndsWith("not both"));
  CHECK_THROWS_WITH(sdk::micro_batch_sizes(sdk::Override{.min_micro_batch_size = 2}, {8}),
                    "minMicroBatchSize needs maxMicroBatchSize");
  CHECK_THROWS_WITH(sdk::micro_batch_sizes(
                        sdk::Override{.min_micro_batch_size = 5, .max_micro_batch_size = 4}, {8}),
                    "minMicroBatchSize 5 is above maxMicroBatchSize 4");
  CHECK_THROWS_WITH(sdk::micro_batch_sizes(sdk::Override{.max_micro_batch_size = 0}, {8}),
                    "maxMicroBatchSize must be at least 1, got 0");
  CHECK_THROWS_WITH(
      sdk::micro_batch_sizes(sdk::Override{.max_micro_batch_size = (1 << 20) + 1}, {8}),
      "maxMicroBatchSize must be at most 1048576, got 1048577");
}

TEST_CASE("a plan a range cannot make names the range in a few characters, as in Python",
          "[sdk][batch]") {
  // A hand-written maxMicroBatchSize at the cap: a million sizes, one line.
  const auto sizes = sdk::micro_batch_sizes(sdk::Override{.max_micro_batch_size = 1 << 20}, {8});
  try {
    sdk::plan_batches(10, 20, sizes);
    FAIL("planned 10 samples over 20 ranks");
  } catch (const elasticrun::ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("micro-batch sizes [1..1048576] and at most 64"));
    CHECK(std::string(e.what()).size() < 300);
  }
  CHECK_THROWS_WITH(sdk::plan_batches(5, 10, {9, 1, 2, 4, 5, 6}),
                    Catch::Contains("sizes [1, 2, 4..6, 9] and"));
}

TEST_CASE("no admissible node count is an error naming the inputs, not an empty flag",
          "[sdk][batch]") {
  CHECK_THROWS_WITH(sdk::discrete_values_flag(7, {8, 2}, 4, {3, 1, 2}),
                    "no node count in [1, 2, 3] admits global batch 7 with 4 ranks per node, "
                    "micro-batch sizes [2, 8] and at most 64 accumulation steps");
  CHECK_THROWS_WITH(sdk::discrete_values_flag(128, {8}, 4, {}),
                    Catch::StartsWith("no node count in [] admits"));
  CHECK_THROWS_WITH(sdk::discrete_values_flag(128, {8}, 0, {1}),
                    "nproc_per_node must be at least 1, got 0");
  CHECK_THROWS_WITH(sdk::discrete_values_flag(128, {8}, 4, {2, 0}),
                    "a node count must be at least 1, got 0");
  sdk::Overrides overrides;
  overrides[2].micro_batch_size = 0;
  CHECK_THROWS_WITH(sdk::discrete_values_flag(128, {8}, 4, {2}, 64, overrides),
                    "a micro-batch size must be at least 1, got 0");
}
