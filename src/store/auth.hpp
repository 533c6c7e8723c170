// The job secret's challenge and response at connect (docs/protocol.md,
// "Authentication"). A store started with a secret serves a connection
// only once its client has proved, by an HMAC-SHA256 under the secret of a
// nonce of each side, that it holds the secret; the server proves the same
// back. Before that the connection may send nothing else: not even
// VALIDATE. The exchange, every field a u64 length and its bytes:
//
//   client  AUTH_HELLO  client nonce (32 random bytes)
//   server              server nonce (32 random bytes, fresh per connection)
//   client  AUTH_PROOF  HMAC(secret, "elasticrun store client" | cn | sn)
//   server              HMAC(secret, "elasticrun store server" | cn | sn)
//   client  VALIDATE, PING, ... as any client
//
// A recorded exchange replayed on a new connection meets a new server
// nonce: its proof is wrong there. What it does not do: hide or protect
// the traffic after it (no TLS), so a man in the middle on the path can
// relay a handshake and ride the connection; it keeps out who lacks the
// secret. Refusals, which the server logs and then closes the connection:
//   - AUTH_PROOF with a wrong proof: answered with an empty proof;
//   - any other request before the handshake (a client without the
//     secret): answered with kRefusedWord where its PING's echo would be;
//   - AUTH_PROOF before AUTH_HELLO, a nonce of the wrong size, either AUTH
//     request once authenticated: closed without an answer.
// Before the handshake a request is judged by its first byte (screen()),
// so a client without the secret cannot make the server buffer anything
// but the 73 bytes an AUTH request may have.
// A store without a secret answers AUTH_HELLO with an empty nonce (a
// client holding a secret refuses such a store) and passes every other
// request through.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/frame.hpp"

namespace elasticrun::store {

inline constexpr size_t kAuthNonceSize = 32;
// "AUTH", little-endian: what a client without the secret reads instead of
// its PING's echo before the connection closes.
inline constexpr uint32_t kRefusedWord = 0x48545541;

// The two proofs of the exchange above.
std::string client_proof(std::string_view secret, std::string_view client_nonce,
                         std::string_view server_nonce);
std::string server_proof(std::string_view secret, std::string_view client_nonce,
                         std::string_view server_nonce);

// One connection's gate, in front of the Handler. Not thread-safe: the
// server's loop owns it with the connection.
class AuthGate {
 public:
  // `secret`: the store's, or null for a store without one; must outlive
  // the gate.
  explicit AuthGate(const std::string* secret) : secret_(secret) {}

  enum class Verdict {
    kPass,      // not the gate's: hand it to the Handler
    kAnswered,  // an AUTH request, answered in `reply`
    kRefused,   // send `reply` (if any), log `why` and close the connection
  };
  // Decides on one complete request. `reply` is appended to. Never throws:
  // a failure of the server's own (no randomness, say) refuses the client.
  Verdict admit(const Request& req, std::string& reply, std::string& why);

  // Before open(): decides on the first byte of a request, before any more
  // of it is buffered. kPass for the AUTH request the handshake is due;
  // kRefused (with `reply` and `why` as admit's) for anything else.
  Verdict screen(uint8_t first_byte, std::string& reply, std::string& why) const;

  // The handshake is done, or the store has no secret.
  bool open() const { return !secret_ || stage_ == Stage::kOpen; }

 private:
  enum class Stage { kStart, kChallenged, kOpen };
  Verdict decide(const Request& req, std::string& reply, std::string& why);

  const std::string* secret_;
  Stage stage_ = Stage::kStart;
  std::string client_nonce_, server_nonce_;
};

}  // namespace elasticrun::store
