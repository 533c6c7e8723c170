// `--world-sizes`: "2:8" (every size from 2 to 8), "2:8:2" (2, 4, 6, 8) or a
// list "2,4,8" (a list's items may be ranges too). Made and parsed here only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elasticrun::plan {

// Sorted, without repeats, each at least 1. ConfigError naming the bad part
// for anything else, or more than 4096 sizes.
std::vector<int64_t> parse_world_sizes(const std::string& text);

}  // namespace elasticrun::plan
