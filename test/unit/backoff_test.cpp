// Retry delays (util/backoff) and message quoting (util/strings).
#include "util/backoff.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "util/strings.hpp"

using namespace elasticrun::util;
using namespace std::chrono_literals;

namespace {

std::vector<long long> draw(ExponentialBackoff& b, int n) {
  std::vector<long long> out;
  for (int i = 0; i < n; ++i) out.push_back(b.next().count());
  return out;
}

}  // namespace

TEST_CASE("backoff delays lie between half the ceiling and the ceiling, doubling up to max",
          "[backoff]") {
  // Ceilings: 100, 200, 400, 800, then capped at 1000.
  const std::vector<long long> ceilings = {100, 200, 400, 800, 1000, 1000, 1000, 1000};
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    ExponentialBackoff b(100ms, 1000ms, 2.0, seed);
    auto delays = draw(b, static_cast<int>(ceilings.size()));
    for (size_t i = 0; i < ceilings.size(); ++i) {
      INFO("seed " << seed << ", delay #" << i << " = " << delays[i]);
      CHECK(delays[i] >= ceilings[i] / 2);
      CHECK(delays[i] <= ceilings[i]);
    }
  }
}

TEST_CASE("backoff delays never shrink while growing and never pass max", "[backoff]") {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    ExponentialBackoff b(10ms, 5000ms, 2.0, seed);
    auto delays = draw(b, 40);
    INFO("seed " << seed);
    // With factor 2, the floor of step n+1 is the ceiling of step n.
    CHECK(std::is_sorted(delays.begin(), delays.begin() + 8));
    CHECK(delays[7] > delays[0]);
    CHECK(*std::max_element(delays.begin(), delays.end()) <= 5000);
    // Far past the cap, delays stay in [max/2, max].
    for (size_t i = 20; i < delays.size(); ++i) CHECK(delays[i] >= 2500);
  }
}

TEST_CASE("a max below the initial delay caps from the start", "[backoff]") {
  ExponentialBackoff b(500ms, 100ms, 2.0, 7);
  for (long long d : draw(b, 10)) {
    CHECK(d >= 50);
    CHECK(d <= 100);
  }
}

TEST_CASE("backoff with the same seed gives the same delays", "[backoff]") {
  ExponentialBackoff a(50ms, 1000ms, 2.0, 42);
  ExponentialBackoff b(50ms, 1000ms, 2.0, 42);
  ExponentialBackoff c(50ms, 1000ms, 2.0, 43);
  auto da = draw(a, 20);
  CHECK(da == draw(b, 20));
  CHECK(da != draw(c, 20));
}

TEST_CASE("reset starts the delays over from the initial ceiling", "[backoff]") {
  ExponentialBackoff b(100ms, 10000ms, 2.0, 3);
  draw(b, 6);  // ceiling now 6400
  b.reset();
  auto d = b.next().count();
  CHECK(d >= 50);
  CHECK(d <= 100);
}

TEST_CASE("quote wraps printable text in single quotes", "[strings]") {
  CHECK(quote("") == "''");
  CHECK(quote("init/") == "'init/'");
  CHECK(quote("a b~") == "'a b~'");
}

TEST_CASE("quote escapes non-printable bytes, quotes and backslashes", "[strings]") {
  CHECK(quote(std::string("a\0b", 3)) == "'a\\x00b'");
  CHECK(quote("\n\x7f\xff") == "'\\x0a\\x7f\\xff'");
  CHECK(quote("it's") == "'it\\'s'");
  CHECK(quote("a\\b") == "'a\\\\b'");
}

TEST_CASE("quote elides what is past max bytes and says how long it was", "[strings]") {
  std::string long_key(100, 'k');
  CHECK(quote(long_key) == "'" + std::string(80, 'k') + "'... (100 bytes)");
  CHECK(quote(std::string(80, 'k')) == "'" + std::string(80, 'k') + "'");
  CHECK(quote("abcdef", 3) == "'abc'... (6 bytes)");
  // Escaping happens before the cut, on the bytes kept.
  CHECK(quote(std::string(5, '\x01'), 2) == "'\\x01\\x01'... (5 bytes)");
}
