// CRC32C (src/ckpt/crc32c), the checksum of every record of a checkpoint
// shard: the published test vectors, and both implementations (the CPU's
// crc32 instruction where there is one, the slicing-by-8 loop everywhere)
// against the one-bit-at-a-time definition at every length and alignment.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "ckpt/crc32c.hpp"

using elasticrun::ckpt::crc32c;
using elasticrun::ckpt::crc32c_portable;

namespace {

std::vector<std::byte> bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

std::vector<std::byte> bytes(std::string_view text) {
  std::vector<std::byte> out;
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::vector<std::byte> filled(std::size_t n, int (*at)(std::size_t)) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(at(i));
  return out;
}

// The definition: reflected polynomial 0x82F63B78, one bit at a time.
std::uint32_t crc32c_bitwise(std::span<const std::byte> data) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::byte b : data) {
    crc ^= static_cast<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

}  // namespace

TEST_CASE("the checksum of \"123456789\" is the catalogued check value 0xE3069283",
          "[ckpt][crc32c]") {
  CHECK(crc32c(bytes("123456789")) == 0xE3069283u);
  CHECK(crc32c({}) == 0);
}

TEST_CASE("the checksums of RFC 3720's test vectors are the ones it lists", "[ckpt][crc32c]") {
  // RFC 3720 (iSCSI), appendix B.4; the RFC writes each CRC as the bytes
  // that go on the wire, least significant first.
  CHECK(crc32c(filled(32, [](std::size_t) { return 0x00; })) == 0x8A9136AAu);
  CHECK(crc32c(filled(32, [](std::size_t) { return 0xFF; })) == 0x62A8AB43u);
  CHECK(crc32c(filled(32, [](std::size_t i) { return static_cast<int>(i); })) == 0x46DD794Eu);
  CHECK(crc32c(filled(32, [](std::size_t i) { return 31 - static_cast<int>(i); })) == 0x113FDB5Cu);
  // An iSCSI read command PDU.
  const auto pdu = bytes({0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                          0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                          0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                          0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  CHECK(crc32c(pdu) == 0xD9963A56u);
}

TEST_CASE("every length and alignment gives the bit-at-a-time definition's checksum",
          "[ckpt][crc32c]") {
  std::mt19937 rng(5);
  std::vector<std::byte> data(200);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (std::size_t start = 0; start < 8; ++start) {
    for (std::size_t n = 0; start + n <= data.size(); ++n) {
      const std::span<const std::byte> part(data.data() + start, n);
      INFO("start " << start << ", length " << n);
      REQUIRE(crc32c(part) == crc32c_bitwise(part));
      REQUIRE(crc32c_portable(part) == crc32c_bitwise(part));
    }
  }
}

TEST_CASE("a checksum continued over a split equals the checksum of the whole", "[ckpt][crc32c]") {
  const auto data = bytes("The quick brown fox jumps over the lazy dog, twice over the dog.");
  const std::span<const std::byte> all(data);
  for (std::size_t cut = 0; cut <= data.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK(crc32c(all.subspan(cut), crc32c(all.first(cut))) == crc32c(all));
    CHECK(crc32c_portable(all.subspan(cut), crc32c_portable(all.first(cut))) == crc32c(all));
  }
}

TEST_CASE("one flipped bit anywhere changes the checksum", "[ckpt][crc32c]") {
  auto data = filled(64, [](std::size_t i) { return static_cast<int>(i * 37 % 251); });
  const std::uint32_t clean = crc32c(data);
  for (std::size_t i = 0; i < data.size() * 8; ++i) {
    data[i / 8] ^= static_cast<std::byte>(1 << (i % 8));
    REQUIRE(crc32c(data) != clean);
    data[i / 8] ^= static_cast<std::byte>(1 << (i % 8));
  }
}
