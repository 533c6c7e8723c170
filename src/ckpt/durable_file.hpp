// The file operations a checkpoint needs, each durable when it returns OK:
// the narrow interface through which all of src/ckpt touches the disk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace elasticrun::ckpt {

// Creates (or truncates) `path`, writes the parts in order, fsyncs it.
util::Status write_file(const std::filesystem::path& path,
                        std::span<const std::span<const std::byte>> parts);

// Writes `text` to path.tmp, fsyncs, renames it over `path`, fsyncs the
// directory: readers see the old content or the new, never a mix.
util::Status replace_file(const std::filesystem::path& path, std::string_view text);

util::Status fsync_dir(const std::filesystem::path& dir);

// Atomically swaps two directory entries (renameat2 RENAME_EXCHANGE).
util::Status exchange(const std::filesystem::path& a, const std::filesystem::path& b);

// Reads `size` bytes at `offset`; EPROTO when the file is shorter.
util::Result<std::vector<std::byte>> read_at(const std::filesystem::path& path,
                                             std::uint64_t offset, std::uint64_t size);

util::Result<std::string> read_text(const std::filesystem::path& path);

}  // namespace elasticrun::ckpt
