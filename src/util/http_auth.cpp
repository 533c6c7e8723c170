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

std::string http_authorization(std::string_view secret, std::string_view method,
                               std::string_view target, std::string_view nonce,
                               std::string_view body) {
  return std::string(kScheme) + "nonce=" + std::string(nonce) +
         ", mac=" + mac_hex(secret, method, target, nonce, body);
}

std::string NonceBook::issue() {
  std::string nonce = hex(random_bytes(kNonceBytes));
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  expire(now);
  while (issued_.size() >= capacity_) {
    live_.erase(issued_.front().second);
    issued_.pop_front();
  }
  issued_.emplace_back(now + ttl_, nonce);
  live_.insert(nonce);
  return nonce;
}

bool NonceBook::redeem(const std::string& nonce) {
  std::lock_guard<std::mutex> lock(mu_);
  expire(std::chrono::steady_clock::now());
  return live_.erase(nonce) == 1;  // its entry in issued_ goes when it expires
}

void NonceBook::expire(std::chrono::steady_clock::time_point now) {
  while (!issued_.empty() && issued_.front().first <= now) {
    live_.erase(issued_.front().second);
    issued_.pop_front();
  }
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
