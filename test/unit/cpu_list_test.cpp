#include "util/cpu_list.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using Catch::Matchers::Contains;
using elasticrun::util::format_cpu_list;
using elasticrun::util::kMaxCpu;
using elasticrun::util::parse_cpu_list;

namespace {

std::vector<int> parsed(const std::string& text) {
  auto r = parse_cpu_list(text);
  if (!r.is_ok()) FAIL(r.status().message());
  return r.value();
}

}  // namespace

TEST_CASE("a CPU list is read as sysfs writes it: ranges, singles, a trailing newline",
          "[cpu_list]") {
  CHECK(parsed("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parsed("5") == std::vector<int>{5});
  CHECK(parsed(" 2 - 3 , 1 ") == std::vector<int>{1, 2, 3});
}

TEST_CASE("an empty CPU list (a memory-only NUMA node) is an empty set", "[cpu_list]") {
  CHECK(parsed("").empty());
  CHECK(parsed("\n").empty());
}

TEST_CASE("overlapping and unordered entries give each CPU once, ascending", "[cpu_list]") {
  CHECK(parsed("4-6,0,5-7,0") == std::vector<int>{0, 4, 5, 6, 7});
}

TEST_CASE("a CPU list that is not one is refused with the offending entry", "[cpu_list]") {
  for (const char* bad : {"a", "1,,2", "3-1", "-1", "1-", "0x1", "1-2-3", "+1", ",", "1 2"}) {
    INFO(bad);
    auto r = parse_cpu_list(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().err() == EINVAL);
  }
  auto r = parse_cpu_list("0-3,7-x");
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().context(), Contains("7-x"));
}

TEST_CASE("a CPU number past the kernel's limit is refused rather than allocated", "[cpu_list]") {
  CHECK_FALSE(parse_cpu_list("0-4000000000").is_ok());
  CHECK_FALSE(parse_cpu_list(std::to_string(kMaxCpu)).is_ok());
  CHECK(parsed(std::to_string(kMaxCpu - 1)) == std::vector<int>{kMaxCpu - 1});
}

TEST_CASE("formatting a CPU set gives the shortest list, which parses back to it", "[cpu_list]") {
  CHECK(format_cpu_list({}).empty());
  CHECK(format_cpu_list({3}) == "3");
  CHECK(format_cpu_list({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7");
  CHECK(format_cpu_list({0, 1}) == "0-1");
  const std::vector<int> cpus{0, 2, 3, 4, 9, 16, 17, 31};
  CHECK(parsed(format_cpu_list(cpus)) == cpus);
}
