// Decoding of TCPStore requests and encoding of replies.
//
// Requests have no length header: a request is complete only when its last
// field has arrived. parse_request() therefore looks at everything buffered
// and says "complete", "incomplete" (wait for more bytes) or "invalid" (close
// the connection). Every length is checked against Limits as soon as it is
// read, before any byte of the field is buffered, so a peer announcing 2^63
// bytes is refused after 9 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/protocol.hpp"

namespace elasticrun::store {

struct Request {
  QueryType type = QueryType::kValidate;
  // Keys in wire order. SET/APPEND/QUEUE_PUSH/COMPARE_SET/GET/ADD/DELETE_KEY/
  // QUEUE_POP/QUEUE_LEN/BARRIER: one key. CHECK/WAIT/MULTI_GET/MULTI_SET: n keys.
  std::vector<std::string> keys;
  // SET/APPEND/QUEUE_PUSH: one value. COMPARE_SET: expected, desired.
  // MULTI_SET: one value per key. AUTH_HELLO: the client's nonce.
  // AUTH_PROOF: the client's proof.
  std::vector<std::string> values;
  // ADD: delta. BARRIER: world size.
  int64_t number = 0;
  // VALIDATE: magic. PING: nonce.
  uint32_t word = 0;
};

// The longest field of AUTH_HELLO and AUTH_PROOF (a nonce, a MAC).
inline constexpr size_t kMaxAuthField = 64;
// The longest endpoint REPLICATE may name (store/replica.hpp).
inline constexpr size_t kMaxEndpoint = 256;

enum class ParseStatus { kComplete, kIncomplete, kInvalid };

struct ParseResult {
  ParseStatus status = ParseStatus::kIncomplete;
  size_t consumed = 0;  // bytes of the request, when complete
  std::string error;    // why, when invalid
  // When incomplete: total bytes that must be buffered before parsing again
  // can succeed (0 if unknown). Lets the server skip re-scanning a large
  // value that arrives in many reads.
  size_t needed = 0;
};

// Parses one request from the front of data. dialect is the connection's:
// kUnknown on its first request, which decides it (VALIDATE with the magic,
// or AUTH_HELLO/AUTH_PROOF, means kModern; anything else kLegacy, whose
// query types are translated to the modern ones). The two AUTH types are
// read in either dialect, so that the gate (store/auth.hpp) sees them. Requests the server does not
// implement for a dialect (WATCH_KEY of PyTorch <= 2.0) are reported invalid with a reason.
ParseResult parse_request(std::string_view data, Dialect& dialect, const Limits& limits,
                          Request& out);

// Reply encoding: integers in little-endian, byte strings as u64 length + bytes.
class ReplyWriter {
 public:
  explicit ReplyWriter(std::string& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v);
  void i64(int64_t v);
  void bytes(std::string_view v);

 private:
  std::string& out_;
};

// Request encoding, used by the client and by tests.
class RequestWriter {
 public:
  explicit RequestWriter(std::string& out) : out_(out) {}
  RequestWriter& type(QueryType t) {
    out_.push_back(static_cast<char>(t));
    return *this;
  }
  RequestWriter& u32(uint32_t v);
  RequestWriter& u64(uint64_t v);
  RequestWriter& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  RequestWriter& bytes(std::string_view v);

 private:
  std::string& out_;
};

}  // namespace elasticrun::store
