// libFuzzer target for util::parse_cpu_list (src/util/cpu_list): the bytes
// are a CPU list as sysfs would hold one (--numa-binding reads node cpulists,
// thread siblings and cache sharing lists). The parser must refuse, with
// EINVAL, what is not a list, and never crash or allocate past its CPU
// limit; what it accepts must be ascending, distinct and below the limit,
// and format_cpu_list of it must parse back to the same set.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "util/cpu_list.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elasticrun::util;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_cpu_list(text);
  if (!parsed.is_ok()) {
    if (parsed.status().err() != EINVAL) std::abort();
    return 0;
  }
  const auto& cpus = parsed.value();
  for (size_t i = 0; i < cpus.size(); ++i) {
    if (cpus[i] < 0 || cpus[i] >= kMaxCpu || (i > 0 && cpus[i] <= cpus[i - 1])) std::abort();
  }
  auto again = parse_cpu_list(format_cpu_list(cpus));
  if (!again.is_ok() || again.value() != cpus) std::abort();
  return 0;
}
