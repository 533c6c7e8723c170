// Directories of their own: a name nobody else holds under a shared
// parent (/tmp, /dev/shm), made by mkdir, so never one that exists.
#pragma once

#include <filesystem>
#include <string>

namespace elasticrun::util {

// 8 characters of [a-z0-9_], as Python's mkdtemp names its directories.
std::string random_suffix();

// Makes base/<prefix><random_suffix()>, owner-only (0700) when
// `owner_only`, else as the umask leaves it, and returns it. Throws
// elasticrun::Error when it cannot (base missing or not writable, or a
// hundred names in a row taken).
std::filesystem::path make_unique_dir(const std::filesystem::path& base, const std::string& prefix,
                                      bool owner_only = true);

}  // namespace elasticrun::util
