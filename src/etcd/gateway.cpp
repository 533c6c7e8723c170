#include "etcd/gateway.hpp"

#include <httplib.h>

#include <algorithm>
#include <thread>

#include "elasticrun/errors.hpp"
#include "etcd/watch.hpp"
#include "util/backoff.hpp"
#include "util/logging.hpp"
#include "util/socket.hpp"

namespace elasticrun::etcd {
namespace {

using Millis = std::chrono::milliseconds;

// How long one member is given to accept a connection before the next is
// tried: a member that is down on a live host refuses at once, one whose
// host is gone never answers.
constexpr Millis kConnectTry{1000};

// gRPC status codes etcd answers with.
constexpr int kResourceExhausted = 8;
constexpr int kUnavailable = 14;

enum class Outcome {
  kDone,          // a reply to return (or an error etcd answered, to throw)
  kNotSent,       // the member was not reached: any request may go to the next
  kMaybeApplied,  // reached, answer lost: only a repeatable request goes again
  kBusy,          // the member cannot serve now (no leader, overloaded): try the next
};

template <typename Rep, typename Period>
void set_timeouts(httplib::Client& c, std::chrono::duration<Rep, Period> connect,
                  std::chrono::duration<Rep, Period> read) {
  const auto us = [](auto d) {
    return std::max<long long>(1000,
                               std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  };
  c.set_connection_timeout(static_cast<time_t>(us(connect) / 1000000),
                           static_cast<time_t>(us(connect) % 1000000));
  c.set_read_timeout(static_cast<time_t>(us(read) / 1000000),
                     static_cast<time_t>(us(read) % 1000000));
  c.set_write_timeout(static_cast<time_t>(us(read) / 1000000),
                      static_cast<time_t>(us(read) % 1000000));
}

// etcd's messages for a request the cluster could not serve at all (not
// applied), and for one whose fate is unknown (a proposal that may commit).
bool not_applied(const ErrorReply& e) {
  return e.message.find("no leader") != std::string::npos ||
         e.message.find("not capable") != std::string::npos ||
         e.message.find("too many requests") != std::string::npos ||
         e.message.find("unhealthy cluster") != std::string::npos || e.code == kResourceExhausted;
}
bool maybe_applied(const ErrorReply& e) {
  return e.message.find("request timed out") != std::string::npos ||
         e.message.find("leader changed") != std::string::npos;
}

}  // namespace

std::string describe(const EtcdOptions& o) {
  std::string s;
  for (const auto& [host, port] : o.endpoints) {
    s += (s.empty() ? "" : ",") + util::format_endpoint(host, port);
  }
  return s;
}

Gateway::Gateway(EtcdOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw ConfigError("etcd: no endpoint given");
  use(0);
}

Gateway::~Gateway() = default;
Gateway::Gateway(Gateway&&) noexcept = default;
Gateway& Gateway::operator=(Gateway&&) noexcept = default;

std::unique_ptr<httplib::Client> Gateway::make_client(size_t member) const {
  const auto& [host, port] = options_.endpoints[member];
  const std::string url =
      std::string(options_.tls ? "https://" : "http://") + util::format_endpoint(host, port);
  auto c = options_.cert_file.empty()
               ? std::make_unique<httplib::Client>(url)
               : std::make_unique<httplib::Client>(url, options_.cert_file, options_.key_file);
  if (options_.tls && !options_.ca_file.empty()) c->set_ca_cert_path(options_.ca_file);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  return c;
}

void Gateway::use(size_t member) {
  current_ = member % options_.endpoints.size();
  const auto& [host, port] = options_.endpoints[current_];
  endpoint_ = util::format_endpoint(host, port);
  client_ = make_client(current_);
}

void Gateway::next_member() {
  use(current_ + 1);
}

Json Gateway::call(const char* path, const Json& body, util::Deadline dl, bool repeatable,
                   const std::string& what) {
  const std::string payload = body.dump();
  util::ExponentialBackoff backoff(Millis(20), Millis(500));
  std::vector<std::string> last_error(options_.endpoints.size());
  size_t tried = 0;          // members tried since the last pause
  bool reached_one = false;  // a member answered, or took the request and ran out of time
  for (;;) {
    const Millis left = dl.remaining();
    set_timeouts(*client_, std::min(left, kConnectTry), left);
    auto res = client_->Post(path, payload, "application/json");
    Outcome outcome = Outcome::kDone;
    std::string why;
    Json reply;
    if (!res) {
      const httplib::Error err = res.error();
      why = httplib::to_string(err);
      switch (err) {
        case httplib::Error::SSLLoadingCerts:
          throw ConfigError("etcd " + endpoint_ + ": " + what + ": cannot load the certificates (" +
                            options_.ca_file + ", " + options_.cert_file + "): " + why);
        case httplib::Error::SSLServerVerification:
          throw ConfigError("etcd " + endpoint_ + ": " + what +
                            ": its certificate does not verify against the CA " +
                            (options_.ca_file.empty() ? "(none given: --rdzv-conf cacert=FILE)"
                                                      : options_.ca_file));
        case httplib::Error::Connection:
        case httplib::Error::ConnectionTimeout:
        case httplib::Error::BindIPAddress:
        case httplib::Error::SSLConnection:
          outcome = Outcome::kNotSent;
          break;
        default:
          outcome = Outcome::kMaybeApplied;
          break;
      }
    } else {
      try {
        reply = Json::parse(res->body);
      } catch (const Json::exception&) {
        if (res->status == 503) {
          outcome = Outcome::kBusy;
          why = "503";
        } else {
          throw StoreError("etcd " + endpoint_ + ": " + what + ": HTTP " +
                           std::to_string(res->status) +
                           " without JSON: " + res->body.substr(0, 200) +
                           " (not etcd's v3 gateway? etcd 3.4 or later is needed)");
        }
      }
      if (outcome == Outcome::kDone) {
        if (const auto e = error_of(reply)) {
          why = e->message;
          if (not_applied(*e) || (res->status == 503 && !maybe_applied(*e))) {
            outcome = Outcome::kBusy;
          } else if (maybe_applied(*e) || e->code == kUnavailable) {
            outcome = Outcome::kMaybeApplied;
          } else {
            throw StoreError("etcd " + endpoint_ + ": " + what + ": " + e->message);
          }
        } else if (res->status != 200) {
          throw StoreError("etcd " + endpoint_ + ": " + what + ": HTTP " +
                           std::to_string(res->status));
        }
      }
    }
    if (outcome == Outcome::kDone) {
      serving_ = true;
      return reply;
    }
    last_error[current_] = why;
    if (outcome != Outcome::kNotSent) reached_one = true;
    if (serving_) {
      // Once per loss, not per retry: the next member may be down too.
      util::logger("etcd")->info("etcd member {} failed ({}: {}); moving to the next", endpoint_,
                                 what, why);
      serving_ = false;
    }
    if (outcome == Outcome::kMaybeApplied && !repeatable && !dl.expired()) {
      const std::string was = endpoint_;
      next_member();
      throw NetworkError("etcd " + was + ": " + what + ": " + why +
                         "; whether it took effect is unknown");
    }
    util::logger("etcd")->debug("etcd {}: {}: {}; trying the next member", endpoint_, what, why);
    next_member();
    if (++tried >= options_.endpoints.size()) {
      tried = 0;
      const Millis pause = std::min(backoff.next(), dl.remaining());
      std::this_thread::sleep_for(pause);
    }
    if (dl.expired()) {
      std::string errors;
      for (size_t i = 0; i < last_error.size(); ++i) {
        if (last_error[i].empty()) continue;
        const auto& [host, port] = options_.endpoints[i];
        errors +=
            (errors.empty() ? "" : "; ") + util::format_endpoint(host, port) + ": " + last_error[i];
      }
      // A cluster that was reached but too slow for the deadline (a wait's
      // slice under load) timed out; one that nobody answers is unreachable.
      const std::string msg =
          "etcd " + describe(options_) + ": " + what + ": no member served (" + errors + ")";
      if (reached_one) throw TimeoutError(msg);
      throw NetworkError(msg);
    }
  }
}

bool Gateway::watching(const std::string& key) const {
  return watch_ && watch_->key() == key;
}

Gateway::WatchEnd Gateway::watch_for_put(const std::string& key, int64_t start_revision,
                                         util::Deadline dl) {
  util::ExponentialBackoff backoff(Millis(20), Millis(500));
  for (;;) {
    if (dl.expired()) return WatchEnd::kTimeout;
    if (!watching(key)) {
      watch_.reset();  // another key's: closed
      watch_ = std::make_unique<KeyWatch>(make_client(current_), key, start_revision);
    }
    switch (watch_->wait(dl)) {
      case KeyWatch::State::kRunning:
        return WatchEnd::kTimeout;  // it stays open for the next wait
      case KeyWatch::State::kPut:
        watch_.reset();
        return WatchEnd::kPut;
      case KeyWatch::State::kCompacted:
        watch_.reset();
        return WatchEnd::kCompacted;
      case KeyWatch::State::kFailed:
        break;
    }
    util::logger("etcd")->debug("etcd {}: watch {}: {}; trying the next member", endpoint_, key,
                                watch_->failure());
    watch_.reset();
    next_member();
    std::this_thread::sleep_for(std::min(backoff.next(), dl.remaining()));
  }
}

}  // namespace elasticrun::etcd
