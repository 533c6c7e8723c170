#include "util/hmac.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "elasticrun/errors.hpp"

namespace elasticrun::util {

std::string hmac_sha256(std::string_view key, std::string_view data) {
  std::string mac(kHmacSize, '\0');
  unsigned int len = 0;
  const unsigned char* out = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                  reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                                  reinterpret_cast<unsigned char*>(mac.data()), &len);
  if (!out || len != kHmacSize) throw Error("HMAC-SHA256 failed (OpenSSL)");
  return mac;
}

bool equal_in_constant_time(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    throw Error("no random bytes from OpenSSL's generator");
  }
  return out;
}

}  // namespace elasticrun::util
