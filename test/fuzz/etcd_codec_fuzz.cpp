// libFuzzer target for the etcd gateway's replies (src/etcd/codec): the
// bytes are one reply, or one line of a watch's stream, as a member (or
// anything at its address) might send. Every reader must either accept it
// or throw StoreError, never crash, and base64 that decodes must decode
// the same after a round trip.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "elasticrun/errors.hpp"
#include "etcd/codec.hpp"

namespace {

template <typename F>
void must_not_crash(F&& f) {
  try {
    f();
  } catch (const elasticrun::StoreError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elasticrun::etcd;
  const std::string text(reinterpret_cast<const char*>(data), size);
  must_not_crash([&] {
    const std::string bytes = unbase64(text);
    if (unbase64(base64(bytes)) != bytes) std::abort();
  });
  const Json reply = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) return 0;
  (void)error_of(reply);
  must_not_crash([&] { (void)parse_range(reply); });
  must_not_crash([&] { (void)parse_put(reply); });
  must_not_crash([&] { (void)parse_delete(reply); });
  must_not_crash([&] { (void)parse_txn(reply); });
  must_not_crash([&] { (void)parse_lease(reply); });
  must_not_crash([&] { (void)parse_watch(reply); });
  return 0;
}
