// A small file read whole, with system calls only: for files of a few
// KiB that other processes write (assignments, secrets), where an error
// must say which call failed.
#pragma once

#include <cstddef>
#include <string>

#include "util/result.hpp"

namespace elasticrun::util {

// The bytes of `path`. Fails with errno and "open PATH" or "read PATH";
// with EFBIG once the file holds more than `max_bytes`.
Result<std::string> read_small_file(const std::string& path, size_t max_bytes);

}  // namespace elasticrun::util
