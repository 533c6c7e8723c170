// The kernel's CPU list format: "0-3,8,10-11", as in
// /sys/devices/system/node/node<N>/cpulist and /proc/self/status's
// Cpus_allowed_list.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::util {

// CPU numbers at or above this are refused: the kernel's NR_CPUS is at most
// 8192, and a list like "0-4000000000" must not allocate gigabytes.
inline constexpr int kMaxCpu = 1 << 16;

// Parses a CPU list into ascending, distinct CPU numbers. Whitespace around
// the list and its entries (the trailing newline of a sysfs file) is
// ignored; an empty list is an empty set. EINVAL for anything else,
// naming the offending text.
Result<std::vector<int>> parse_cpu_list(std::string_view text);

// The shortest list for cpus (ascending, distinct): {0,1,2,4,6,7} -> "0-2,4,6-7".
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace elasticrun::util
