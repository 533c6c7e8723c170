// HMAC-SHA256 and what a challenge and response need around it, from
// OpenSSL's libcrypto: the MAC, a comparison whose time does not depend on
// where two MACs differ, and random bytes for nonces.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace elasticrun::util {

inline constexpr size_t kHmacSize = 32;  // SHA-256's

// HMAC-SHA256 of `data` under `key`: kHmacSize bytes.
std::string hmac_sha256(std::string_view key, std::string_view data);

// True when a and b are the same bytes; for equal sizes, in time that does
// not depend on their contents (CRYPTO_memcmp). Sizes are not secret.
bool equal_in_constant_time(std::string_view a, std::string_view b);

// n bytes from the system's cryptographic generator. Throws elasticrun::Error
// when it cannot give them.
std::string random_bytes(size_t n);

}  // namespace elasticrun::util
