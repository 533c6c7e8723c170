// CRC32C (Castagnoli), the checksum of every record in a checkpoint shard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace elasticrun::ckpt {

// The CRC32C of `data`, continuing from `crc` (0 to start). crc32c("123456789")
// is 0xE3069283. On x86-64 CPUs with SSE4.2 (checked at run time) the CPU's
// crc32 instruction computes it; elsewhere crc32c_portable does.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

// The same checksum in portable code (slicing-by-8), whatever the CPU.
std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc = 0);

}  // namespace elasticrun::ckpt
