#include "util/http_auth.hpp"

#include "util/hmac.hpp"

namespace elasticrun::util {
namespace {

constexpr std::string_view kScheme = "Elasticrun-HMAC ";
constexpr size_t kNonceBytes = 32;

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string mac_hex(std::string_view secret, std::string_view method, std::string_view target,
                    std::string_view nonce, std::string_view body) {
  std::string data = "elasticrun http\n";
  data.append(method).append("\n").append(target).append("\n").append(nonce).append("\n");
  data.append(body);
  return hex(hmac_sha256(secret, data));
}

// The value of `name=` in "a=x, b=y"; empty when absent.
std::string_view field(std::string_view params, std::string_view name) {
  size_t at = 0;
  while (at < params.size()) {
    while (at < params.size() && (params[at] == ' ' || params[at] == ',')) ++at;
    const size_t end = std::min(params.find(',', at), params.size());
    const std::string_view item = params.substr(at, end - at);
    if (item.size() > name.size() && item.substr(0, name.size()) == name &&
        item[name.size()] == '=') {
      return item.substr(name.size() + 1);
    }
    at = end;
  }
  return {};
}

}  // namespace

bool is_auth_nonce(std::string_view text) {
  return text.size() == 2 * kNonceBytes &&
         text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string http_authorization(std::string_view secret, std::string_view method,
                               std::string_view target, std::string_view nonce,
                               std::string_view body) {
  return std::string(kScheme) + "nonce=" + std::string(nonce) +
         ", mac=" + mac_hex(secret, method, target, nonce, body);
}

std::string NonceBook::issue(const std::string& peer) {
  std::string nonce = hex(random_bytes(kNonceBytes));
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  expire(now);
  for (auto p = peers_.find(peer); p != peers_.end() && p->second.live >= per_peer_;
       p = peers_.find(peer)) {
    forget_first_live(p->second.order);  // this peer's oldest (may erase its entry)
  }
  while (live_.size() >= capacity_ && forget_first_live(order_)) {
  }
  live_.emplace(nonce, Live{now + ttl_, peer});
  PeerNonces& mine = peers_[peer];
  mine.order.push_back(nonce);
  ++mine.live;
  compact(mine.order, mine.live);
  order_.push_back(nonce);
  compact(order_, live_.size());
  return nonce;
}

bool NonceBook::redeem(const std::string& nonce) {
  std::lock_guard<std::mutex> lock(mu_);
  expire(Clock::now());
  auto it = live_.find(nonce);
  if (it == live_.end()) return false;
  forget(it);
  return true;
}

void NonceBook::expire(Clock::time_point now) {
  while (!order_.empty()) {
    auto it = live_.find(order_.front());
    if (it != live_.end()) {
      if (it->second.expires > now) return;  // issue order is expiry order
      forget(it);
    }
    order_.pop_front();
  }
}

void NonceBook::forget(std::unordered_map<std::string, Live>::iterator it) {
  auto p = peers_.find(it->second.peer);
  if (--p->second.live == 0) peers_.erase(p);
  live_.erase(it);
}

bool NonceBook::forget_first_live(std::deque<std::string>& order) {
  while (!order.empty()) {
    auto it = live_.find(order.front());
    order.pop_front();
    if (it != live_.end()) {
      forget(it);  // may erase the peer entry that holds `order`: return at once
      return true;
    }
  }
  return false;
}

void NonceBook::compact(std::deque<std::string>& order, size_t live) {
  if (order.size() < 2 * live + 16) return;
  std::deque<std::string> kept;
  for (std::string& n : order) {
    if (live_.count(n) != 0) kept.push_back(std::move(n));
  }
  order.swap(kept);
}

std::string check_http_authorization(std::string_view secret, NonceBook& book,
                                     std::string_view method, std::string_view target,
                                     std::string_view body, std::string_view authorization) {
  if (authorization.empty()) {
    return "no Authorization header: this agent asks for the job secret (docs/security.md)";
  }
  if (authorization.substr(0, kScheme.size()) != kScheme) {
    return "the Authorization header is not Elasticrun-HMAC";
  }
  const std::string_view params = authorization.substr(kScheme.size());
  const std::string nonce(field(params, "nonce"));
  const std::string_view mac = field(params, "mac");
  if (nonce.empty() || mac.empty()) return "the Authorization header lacks nonce= or mac=";
  if (!book.redeem(nonce)) {
    return "the nonce is unknown, spent or expired (a replayed request?): get one from " +
           std::string(kAuthNoncePath) + " for each request";
  }
  if (!equal_in_constant_time(mac, mac_hex(secret, method, target, nonce, body))) {
    return "a wrong MAC: another secret, or the request was changed";
  }
  return {};
}

}  // namespace elasticrun::util
