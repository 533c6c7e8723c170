// The C++ elastic sampler (include/elasticrun/sampler.hpp). The integration
// suite checks it against the Python SDK index for index; these check its
// own promises: exactly-once across resizes, the pinned permutation, state.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "elasticrun/sampler.hpp"

namespace sdk = elasticrun::sdk;

TEST_CASE("the permutation is the pinned one the Python SDK uses", "[sdk][sampler]") {
  CHECK(sdk::Permutation(1000, 42, 3, true).take(0, 10) ==
        std::vector<uint64_t>{692, 695, 15, 597, 790, 267, 473, 276, 201, 458});
  CHECK(sdk::Permutation(5, 0, 0, true).take(0, 5) == std::vector<uint64_t>{3, 2, 1, 4, 0});
  CHECK(sdk::Permutation(5, 0, 0, false).take(0, 5) == std::vector<uint64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("the permutation is a bijection at every length", "[sdk][sampler]") {
  for (uint64_t n : {0, 1, 2, 3, 4, 5, 17, 255, 256, 257, 1025}) {
    auto values = sdk::Permutation(n, n * 31 + 1, n % 3, true).take(0, n);
    std::sort(values.begin(), values.end());
    std::vector<uint64_t> want(n);
    for (uint64_t i = 0; i < n; ++i) want[i] = i;
    CHECK(values == want);
  }
}

TEST_CASE("every sample is seen once per epoch across random resizes with uneven batches",
          "[sdk][sampler]") {
  std::mt19937 rng(1234);
  for (int run = 0; run < 50; ++run) {
    const uint64_t n = 1 + rng() % 500;
    const bool drop_last = run % 2 == 1;
    sdk::ElasticSampler job(n, rng(), true, drop_last);  // the state every rank shares
    std::vector<uint64_t> seen;
    while (true) {
      const int world = 1 + static_cast<int>(rng() % 6);
      std::vector<int64_t> local(static_cast<size_t>(world));
      for (auto& b : local) b = 1 + static_cast<int64_t>(rng() % 9);
      // Each rank resumes from the shared state at the new size.
      std::vector<sdk::ElasticSampler> ranks;
      for (int r = 0; r < world; ++r) {
        ranks.emplace_back(n, job.state().seed, true, drop_last);
        ranks.back().load_state(job.state());
        ranks.back().set_world(r, world, local);
      }
      if (ranks[0].steps_left() == 0) break;
      const uint64_t steps = 1 + rng() % std::min<uint64_t>(3, ranks[0].steps_left());
      for (uint64_t s = 0; s < steps; ++s) {
        for (auto& rank : ranks) {
          const auto mine = rank.step_indices(0);
          seen.insert(seen.end(), mine.begin(), mine.end());
        }
        for (auto& rank : ranks) rank.advance();
      }
      job.load_state(ranks[0].state());
    }
    // In the permutation's order, each once; the tail only without drop_last.
    const auto want = sdk::Permutation(n, job.state().seed, 0, true).take(0, seen.size());
    CHECK(seen == want);
    if (!drop_last) CHECK(seen.size() == n);
  }
}

TEST_CASE("the state round-trips and a foreign one is refused", "[sdk][sampler]") {
  sdk::ElasticSampler a(100, 5);
  a.set_world(0, 2, {4, 6});
  a.set_epoch(2);
  a.advance(3);
  CHECK(a.position() == 30);
  sdk::ElasticSampler b(100, 5);
  b.load_state(a.state());
  CHECK(b.state() == a.state());
  b.set_world(1, 2, {4, 6});
  a.set_world(1, 2, {4, 6});
  CHECK(b.step_indices() == a.step_indices());
  CHECK(b.indices() == a.indices());
  CHECK(b.size() == b.indices().size());

  sdk::ElasticSampler other_seed(100, 6);
  CHECK_THROWS_WITH(other_seed.load_state(a.state()),
                    "sampler state has seed=5, this sampler seed=6");
  sdk::ElasticSampler shorter(99, 5);
  CHECK_THROWS_WITH(shorter.load_state(a.state()), Catch::Contains("dataset_len=100"));
  CHECK_THROWS_WITH(a.advance(100),
                    Catch::Contains("cannot advance 100 steps: epoch 2 has 7 left"));
  sdk::ElasticSampler no_world(10);
  CHECK_THROWS_WITH(no_world.step_indices(), Catch::Contains("call set_world"));
  CHECK_THROWS_WITH(no_world.set_world(2, 2, 5), "rank 2 is outside a world of 2 ranks");
}
