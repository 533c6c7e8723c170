// The job secret on HTTP (docs/security.md, "HTTP"): the agent's control
// API and the memory tier's peer server serve a gated path only to a
// request that proves it holds the secret. Made and checked here only:
//
//   GET /auth/nonce    -> 64 hex digits (text/plain): a nonce good for one
//                         request within 30 s
//   the request, with  Authorization: Elasticrun-HMAC nonce=<hex>, mac=<hex>
//   mac = hex(HMAC-SHA256(secret, "elasticrun http\n" METHOD "\n" TARGET "\n"
//                         NONCE "\n" BODY))
//
// TARGET is the path with its query string, as sent. A nonce is spent by
// its first use, right or wrong, so a recorded request replayed is refused.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace elasticrun::util {

inline constexpr const char* kAuthNoncePath = "/auth/nonce";

// True for what /auth/nonce hands out: 64 lowercase hex digits. A client
// checks the answer before it goes into a header.
bool is_auth_nonce(std::string_view text);

// The Authorization header's value for a request.
std::string http_authorization(std::string_view secret, std::string_view method,
                               std::string_view target, std::string_view nonce,
                               std::string_view body);

// The nonces a server handed out and not yet spent. Thread-safe. Anyone who
// reaches the port may ask for nonces, so a flood must not crowd out the
// others': each peer address holds at most `per_peer` outstanding (past
// that its own oldest is forgotten), and past `capacity` in all the oldest
// is. A flood from one address thus costs only that address's requests.
class NonceBook {
 public:
  explicit NonceBook(std::chrono::seconds ttl = std::chrono::seconds(30), size_t capacity = 4096,
                     size_t per_peer = 64)
      : ttl_(ttl),
        capacity_(std::max<size_t>(capacity, 1)),
        per_peer_(std::max<size_t>(per_peer, 1)) {}
  // A fresh nonce for a request from `peer` (its address).
  std::string issue(const std::string& peer = {});
  // True for a nonce issued within the ttl and not spent or forgotten; spends it.
  bool redeem(const std::string& nonce);

 private:
  using Clock = std::chrono::steady_clock;
  struct Live {
    Clock::time_point expires;
    std::string peer;
  };
  struct PeerNonces {
    std::deque<std::string> order;  // in issue order; spent ones until compacted
    size_t live = 0;
  };
  // With mu_ held.
  void expire(Clock::time_point now);
  void forget(std::unordered_map<std::string, Live>::iterator it);
  // Pops `order`'s front until a live nonce went; false when none was left.
  bool forget_first_live(std::deque<std::string>& order);
  // Drops the spent and forgotten entries of `order` once it is twice `live`.
  void compact(std::deque<std::string>& order, size_t live);

  const std::chrono::seconds ttl_;
  const size_t capacity_, per_peer_;
  std::mutex mu_;
  std::unordered_map<std::string, Live> live_;         // nonce -> when it expires, whose
  std::deque<std::string> order_;                      // every nonce in issue order, lazily
  std::unordered_map<std::string, PeerNonces> peers_;  // peers holding live nonces
};

// Empty when `authorization` (the header's value, "" if absent) proves the
// secret for this request; else why not, for the 401 and the log. Spends
// the nonce it names either way.
std::string check_http_authorization(std::string_view secret, NonceBook& book,
                                     std::string_view method, std::string_view target,
                                     std::string_view body, std::string_view authorization);

}  // namespace elasticrun::util
