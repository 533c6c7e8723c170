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

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

namespace elasticrun::util {

inline constexpr const char* kAuthNoncePath = "/auth/nonce";

// The Authorization header's value for a request.
std::string http_authorization(std::string_view secret, std::string_view method,
                               std::string_view target, std::string_view nonce,
                               std::string_view body);

// The nonces a server handed out and not yet spent. Thread-safe.
class NonceBook {
 public:
  explicit NonceBook(std::chrono::seconds ttl = std::chrono::seconds(30), size_t capacity = 4096)
      : ttl_(ttl), capacity_(capacity) {}
  // A fresh nonce; past `capacity` outstanding, the oldest is forgotten.
  std::string issue();
  // True for a nonce issued within the ttl and not spent; spends it.
  bool redeem(const std::string& nonce);

 private:
  void expire(std::chrono::steady_clock::time_point now);  // with mu_ held

  const std::chrono::seconds ttl_;
  const size_t capacity_;
  std::mutex mu_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> issued_;
  std::unordered_set<std::string> live_;
};

// Empty when `authorization` (the header's value, "" if absent) proves the
// secret for this request; else why not, for the 401 and the log. Spends
// the nonce it names either way.
std::string check_http_authorization(std::string_view secret, NonceBook& book,
                                     std::string_view method, std::string_view target,
                                     std::string_view body, std::string_view authorization);

}  // namespace elasticrun::util
