// The TCPStore wire protocol's side of StoreClient (docs/protocol.md): one
// connection to elasticrun's store or PyTorch's, the job secret's
// handshake, and with standbys the move to whichever endpoint serves.
#include "store/tcp_backend.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "store/auth.hpp"
#include "store/frame.hpp"
#include "store/replica.hpp"
#include "util/hmac.hpp"
#include "util/logging.hpp"
#include "util/strings.hpp"

namespace elasticrun::store {

using util::Deadline;
using Duration = Backend::Duration;

// How long one endpoint is tried when the store has standbys.
constexpr std::chrono::milliseconds kEndpointTry{1000};

struct TcpBackend::Conn {
  util::Socket sock;
  std::string endpoint;
  StoreClientOptions options;
  bool broken = false;  // the stream is out of sync: refuse further calls
  // The store's own endpoint, then its standbys'; `current` serves now.
  std::vector<std::pair<std::string, uint16_t>> endpoints;
  size_t current = 0;

  static void open(Conn* impl, const std::string& host, uint16_t port, Deadline dl);

  // Connects to whichever endpoint serves, starting with the current one;
  // with standbys each is tried briefly in turn until `dl`.
  void reconnect(Deadline dl) {
    if (endpoints.size() == 1) {
      open(this, endpoints[0].first, endpoints[0].second, dl);
      return;
    }
    std::string errors;
    for (size_t n = 0;; ++n) {
      const size_t i = (current + n) % endpoints.size();
      const Deadline one = Deadline::after(std::min<Duration>(dl.remaining(), kEndpointTry));
      try {
        open(this, endpoints[i].first, endpoints[i].second, one);
        current = i;
        return;
      } catch (const ConfigError&) {
        throw;  // the secrets differ: another endpoint would not change that
      } catch (const Error& e) {
        if (n < endpoints.size()) errors += std::string(errors.empty() ? "" : "; ") + e.what();
      }
      if (dl.expired()) {
        throw NetworkError("store: neither it nor a standby serves (" + errors + ")");
      }
      if (i + 1 == endpoints.size()) std::this_thread::sleep_for(kEndpointTry / 10);
    }
  }

  // The connection is closed by the peer (an idle client has nothing to
  // read: anything readable is the end).
  bool gone() {
    if (!sock.valid()) return true;
    auto r = sock.wait_readable(Deadline::after(Duration(0)));
    return !r.is_ok() || r.value();
  }

  // Runs one call. With standbys, a connection found closed is replaced
  // before the call, and a call whose connection breaks is repeated on the
  // endpoint that serves now when `repeatable` (asking twice gives what
  // asking once does); otherwise it throws NetworkError saying the store
  // moved and that whether it took effect is unknown.
  // A connection that timed out mid-call is broken too (fail() says so): a
  // host that vanished without a FIN is found that way. The repeated call
  // keeps the first one's deadline (deadline() pins it).
  template <typename F>
  auto call(bool repeatable, const char* what, F&& f) -> decltype(f()) {
    if (endpoints.size() == 1) return f();
    if (broken || gone()) reconnect(Deadline::after(options.connect_timeout));
    struct Pin {
      Conn* impl;
      explicit Pin(Conn* i) : impl(i) { impl->pinning = true; }
      ~Pin() {
        impl->pinning = false;
        impl->pinned.reset();
      }
    } pin(this);
    std::string failure;
    try {
      return f();
    } catch (const NetworkError& e) {
      failure = e.what();
    } catch (const TimeoutError& e) {
      if (!broken) throw;  // a wait that ran out on a healthy connection
      failure = e.what();
    }
    reconnect(Deadline::after(options.connect_timeout));
    if (!repeatable) {
      throw NetworkError(failure + "; the store now serves at " + endpoint + ", and whether this " +
                         what + " took effect is unknown");
    }
    return f();
  }

  // Within call(), every deadline of the call is its first one.
  Deadline deadline(Duration timeout) {
    if (pinned) return *pinned;
    const Deadline d =
        Deadline::after(timeout == StoreClient::kDefault ? options.timeout : timeout);
    if (pinning) pinned = d;
    return d;
  }
  bool pinning = false;
  std::optional<Deadline> pinned;

  // With standbys, a request without a reply (SET, MULTI_SET, APPEND,
  // QUEUE_PUSH) is followed by a PING in the same send, whose echo the
  // store holds until the standby has the write: the call returns once the
  // write is safe, and a host lost before that fails it like any call.
  void send_confirmed(std::string& frame, Deadline dl, const std::string& what) {
    if (endpoints.size() == 1) return send(frame, dl, what);
    constexpr uint32_t kConfirm = 0xC0F1;
    RequestWriter(frame).type(QueryType::kPing).u32(kConfirm);
    send(frame, dl, what);
    if (read_fixed<uint32_t>(dl, what) != kConfirm) protocol_error(what, 0);
  }

  std::string wire_key(std::string_view key) const { return options.key_prefix + std::string(key); }

  [[noreturn]] void fail(const util::Status& st, const std::string& what) {
    // A timeout or reset mid-request leaves an unknown number of reply bytes
    // in flight; the only safe thing is to stop using the connection.
    broken = true;
    sock.close();
    std::string msg = "store " + endpoint + ": " + what + ": " + st.message();
    if (st.err() == ETIMEDOUT) throw TimeoutError(msg);
    throw NetworkError(msg);
  }

  void check_usable(const std::string& what) const {
    if (broken) {
      throw NetworkError("store " + endpoint + ": " + what +
                         ": connection unusable after an earlier error");
    }
  }

  void send(const std::string& frame, Deadline dl, const std::string& what) {
    check_usable(what);
    util::Status st = sock.send_all(frame.data(), frame.size(), dl);
    if (!st) fail(st, what);
  }

  template <typename T>
  T read_fixed(Deadline dl, const std::string& what) {
    T v{};
    util::Status st = sock.recv_exact(&v, sizeof(v), dl);
    if (!st) fail(st, what);
    return v;
  }

  // A length-prefixed reply of at most `max` bytes. The store's own limits
  // are far below the default; a larger length means we are not talking
  // to a store, and allocating it would be a mistake.
  std::string read_bytes(Deadline dl, const std::string& what, uint64_t max = 1ull << 32) {
    auto len = read_fixed<uint64_t>(dl, what);
    if (len > max) {
      broken = true;
      sock.close();
      throw StoreError("store " + endpoint + ": " + what + ": reply claims " + std::to_string(len) +
                       " bytes; not a TCPStore?");
    }
    std::string s(len, '\0');
    util::Status st = sock.recv_exact(s.data(), len, dl);
    if (!st) fail(st, what);
    return s;
  }

  // WAIT (or BARRIER) already sent: waits for STOP_WAITING until dl; on
  // timeout cancels the wait so the connection stays usable, then throws.
  void await_stop(Deadline dl, const std::string& what) {
    auto readable = sock.wait_readable(dl);
    if (!readable.is_ok()) fail(readable.status(), what);
    if (readable.value()) {
      expect_byte(static_cast<uint8_t>(store::WaitResponse::kStopWaiting), dl, what);
      return;
    }
    // Timed out. Cancel; the server may have released us just before it saw
    // the cancel, in which case a STOP_WAITING precedes WAIT_CANCELED.
    std::string frame;
    RequestWriter(frame).type(QueryType::kCancelWait);
    // The cancel is a request like any other: the client's own timeout.
    Deadline cancel_dl = Deadline::after(options.timeout);
    send(frame, cancel_dl, what + " (cancel)");
    auto b = read_fixed<uint8_t>(cancel_dl, what + " (cancel)");
    if (b == static_cast<uint8_t>(store::WaitResponse::kStopWaiting)) {
      b = read_fixed<uint8_t>(cancel_dl, what + " (cancel)");
    }
    if (b != static_cast<uint8_t>(store::WaitResponse::kWaitCanceled)) {
      protocol_error(what + " (cancel)", b);
    }
    throw TimeoutError("store " + endpoint + ": " + what + ": timed out");
  }

  void expect_byte(uint8_t want, Deadline dl, const std::string& what) {
    auto b = read_fixed<uint8_t>(dl, what);
    if (b != want) protocol_error(what, b);
  }

  [[noreturn]] void protocol_error(const std::string& what, uint8_t got) {
    broken = true;
    sock.close();
    throw StoreError("store " + endpoint + ": " + what + ": unexpected reply byte " +
                     std::to_string(got));
  }

  void wait_keys(const std::vector<std::string>& keys, Deadline dl, const std::string& what) {
    std::string frame;
    RequestWriter w(frame);
    w.type(QueryType::kWait).u64(keys.size());
    for (const auto& k : keys) w.bytes(wire_key(k));
    send(frame, dl, what);
    await_stop(dl, what);
  }

  // GET and MULTI_GET alone; get() and multi_get() wait for the keys first.
  std::string get(std::string_view key, Deadline dl, const std::string& what) {
    std::string frame;
    RequestWriter(frame).type(QueryType::kGet).bytes(wire_key(key));
    send(frame, dl, what);
    return read_bytes(dl, what);
  }

  std::vector<std::string> multi_get(const std::vector<std::string>& keys, Deadline dl,
                                     const std::string& what) {
    std::string frame;
    RequestWriter w(frame);
    w.type(QueryType::kMultiGet).u64(keys.size());
    for (const auto& k : keys) w.bytes(wire_key(k));
    send(frame, dl, what);
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) values.push_back(read_bytes(dl, what));
    return values;
  }
};

// Connects to one endpoint of the store and validates the protocol, after
// the job secret's handshake when there is one; on success `impl` holds the
// connection. Throws as StoreClient::connect.
void TcpBackend::Conn::open(Conn* impl, const std::string& host, uint16_t port, Deadline dl) {
  const std::string endpoint = util::format_endpoint(host, port);
  auto sock = util::Socket::connect(host, port, dl);
  if (!sock.is_ok()) throw NetworkError("store " + endpoint + ": " + sock.status().message());
  impl->sock = std::move(sock).value();
  impl->endpoint = endpoint;
  impl->broken = false;
  Deadline hs = Deadline::after(std::min<Duration>(dl.remaining(), std::chrono::seconds(30)));
  const bool secret = !impl->options.secret.empty();
  std::string frame;
  std::string client_nonce, server_nonce;
  if (secret) {
    // The job secret's challenge and response first (store/auth.hpp).
    client_nonce = util::random_bytes(store::kAuthNonceSize);
    RequestWriter(frame).type(QueryType::kAuthHello).bytes(client_nonce);
    impl->send(frame, hs, "handshake");
    server_nonce = impl->read_bytes(hs, "handshake", store::kMaxAuthField);
    if (server_nonce.empty()) {
      throw ConfigError("store " + endpoint +
                        " asks for no secret, and this client holds the job's: a store that "
                        "cannot prove it is the job's is not used (start it with the same "
                        "secret file)");
    }
    if (server_nonce.size() != store::kAuthNonceSize) {
      throw StoreError("store " + endpoint + ": handshake: a nonce of " +
                       std::to_string(server_nonce.size()) + " bytes; not elasticrun's store?");
    }
    frame.clear();
    RequestWriter(frame)
        .type(QueryType::kAuthProof)
        .bytes(store::client_proof(impl->options.secret, client_nonce, server_nonce));
  }
  // VALIDATE has no reply; PING proves the peer speaks the protocol. The
  // nonce is our pid, as PyTorch's client sends. Sent with AUTH_PROOF: one
  // round trip for both.
  const auto nonce = static_cast<uint32_t>(::getpid());
  RequestWriter(frame)
      .type(QueryType::kValidate)
      .u32(store::kValidationMagic)
      .type(QueryType::kPing)
      .u32(nonce);
  impl->send(frame, hs, "handshake");
  if (secret) {
    const std::string proof = impl->read_bytes(hs, "handshake", store::kMaxAuthField);
    if (proof.empty()) {
      throw ConfigError("store " + endpoint +
                        " refused this client's proof of the job secret: the two secrets differ");
    }
    if (!util::equal_in_constant_time(
            proof, store::server_proof(impl->options.secret, client_nonce, server_nonce))) {
      throw ConfigError("store " + endpoint +
                        " answered with a wrong proof of the job secret: not this job's store, "
                        "or one with another secret");
    }
  }
  uint32_t echoed = 0;
  try {
    echoed = impl->read_fixed<uint32_t>(hs, "handshake");
  } catch (const NetworkError& e) {
    if (secret) throw;
    throw NetworkError(std::string(e.what()) +
                       " (a store started with a job secret closes connections that bring none)");
  }
  if (echoed == store::kRefusedWord && !secret) {
    throw ConfigError("store " + endpoint +
                      " asks for the job's secret, and this client has none: name its file "
                      "with ELASTICRUN_SECRET_FILE (or --rdzv-conf secret_file=PATH)");
  }
  if (echoed == store::kStandbyWord) {
    impl->sock.close();
    throw NetworkError("store " + endpoint +
                       " is a standby: it serves no client until its primary is lost");
  }
  if (echoed != nonce) {
    throw StoreError("store " + endpoint + ": handshake: PING answered with " +
                     std::to_string(echoed) + " instead of " + std::to_string(nonce) +
                     "; not a TCPStore of PyTorch >= 2.5 or elasticrun?");
  }
}

void TcpBackend::set(std::string_view key, std::string_view value, Duration timeout) {
  return c_->call(true, "set", [&] {
    std::string frame;
    RequestWriter(frame).type(QueryType::kSet).bytes(c_->wire_key(key)).bytes(value);
    c_->send_confirmed(frame, c_->deadline(timeout), "set " + util::quote(key));
  });
}

std::string TcpBackend::get(std::string_view key, Duration timeout) {
  return c_->call(true, "get", [&] {
    const std::string what = "get " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    c_->wait_keys({std::string(key)}, dl, what);
    return c_->get(key, dl, what);
  });
}

std::string TcpBackend::get_present(std::string_view key, Duration timeout) {
  return c_->call(true, "get_present",
                  [&] { return c_->get(key, c_->deadline(timeout), "get " + util::quote(key)); });
}

int64_t TcpBackend::add(std::string_view key, int64_t delta, Duration timeout) {
  return c_->call(false, "add", [&] {
    const std::string what = "add " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame).type(QueryType::kAdd).bytes(c_->wire_key(key)).i64(delta);
    c_->send(frame, dl, what);
    return c_->read_fixed<int64_t>(dl, what);
  });
}

std::string TcpBackend::compare_set(std::string_view key, std::string_view expected,
                                    std::string_view desired, Duration timeout) {
  return c_->call(true, "compare_set", [&] {
    const std::string what = "compare_set " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame)
        .type(QueryType::kCompareSet)
        .bytes(c_->wire_key(key))
        .bytes(expected)
        .bytes(desired);
    c_->send(frame, dl, what);
    return c_->read_bytes(dl, what);
  });
}

bool TcpBackend::check(const std::vector<std::string>& keys, Duration timeout) {
  return c_->call(true, "check", [&] {
    const std::string what = "check " + describe_keys(keys);
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter w(frame);
    w.type(QueryType::kCheck).u64(keys.size());
    for (const auto& k : keys) w.bytes(c_->wire_key(k));
    c_->send(frame, dl, what);
    auto b = c_->read_fixed<uint8_t>(dl, what);
    if (b == static_cast<uint8_t>(store::CheckResponse::kReady)) return true;
    if (b == static_cast<uint8_t>(store::CheckResponse::kNotReady)) return false;
    c_->protocol_error(what, b);
  });
}

void TcpBackend::wait(const std::vector<std::string>& keys, Duration timeout) {
  return c_->call(true, "wait", [&] {
    c_->wait_keys(keys, c_->deadline(timeout), "wait " + describe_keys(keys));
  });
}

int64_t TcpBackend::num_keys(Duration timeout) {
  return c_->call(true, "num_keys", [&] {
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame).type(QueryType::kGetNumKeys);
    c_->send(frame, dl, "num_keys");
    return c_->read_fixed<int64_t>(dl, "num_keys");
  });
}

bool TcpBackend::delete_key(std::string_view key, Duration timeout) {
  return c_->call(true, "delete_key", [&] {
    const std::string what = "delete_key " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame).type(QueryType::kDeleteKey).bytes(c_->wire_key(key));
    c_->send(frame, dl, what);
    return c_->read_fixed<int64_t>(dl, what) == 1;
  });
}

void TcpBackend::append(std::string_view key, std::string_view value, Duration timeout) {
  return c_->call(false, "append", [&] {
    std::string frame;
    RequestWriter(frame).type(QueryType::kAppend).bytes(c_->wire_key(key)).bytes(value);
    c_->send_confirmed(frame, c_->deadline(timeout), "append " + util::quote(key));
  });
}

std::vector<std::string> TcpBackend::multi_get(const std::vector<std::string>& keys,
                                               Duration timeout) {
  return c_->call(true, "multi_get", [&] {
    const std::string what = "multi_get " + describe_keys(keys);
    Deadline dl = c_->deadline(timeout);
    c_->wait_keys(keys, dl, what);
    return c_->multi_get(keys, dl, what);
  });
}

std::vector<std::string> TcpBackend::multi_get_present(const std::vector<std::string>& keys,
                                                       Duration timeout) {
  return c_->call(true, "multi_get_present", [&] {
    return c_->multi_get(keys, c_->deadline(timeout), "multi_get " + describe_keys(keys));
  });
}

void TcpBackend::multi_set(const std::vector<std::string>& keys,
                           const std::vector<std::string>& values, Duration timeout) {
  return c_->call(true, "multi_set", [&] {
    std::string frame;
    RequestWriter w(frame);
    w.type(QueryType::kMultiSet).u64(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) w.bytes(c_->wire_key(keys[i])).bytes(values[i]);
    c_->send_confirmed(frame, c_->deadline(timeout), "multi_set " + describe_keys(keys));
  });
}

void TcpBackend::queue_push(std::string_view key, std::string_view value, Duration timeout) {
  return c_->call(false, "queue_push", [&] {
    std::string frame;
    RequestWriter(frame).type(QueryType::kQueuePush).bytes(c_->wire_key(key)).bytes(value);
    c_->send_confirmed(frame, c_->deadline(timeout), "queue_push " + util::quote(key));
  });
}

std::string TcpBackend::queue_pop(std::string_view key, Duration timeout) {
  return c_->call(false, "queue_pop", [&] {
    const std::string what = "queue_pop " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    // Another consumer may take the element between our WAIT and POP: retry
    // until the deadline rather than report an empty queue we waited for.
    for (;;) {
      c_->wait_keys({std::string(key)}, dl, what);
      std::string frame;
      RequestWriter(frame).type(QueryType::kQueuePop).bytes(c_->wire_key(key));
      c_->send(frame, dl, what);
      auto len = c_->read_fixed<int64_t>(dl, what);
      if (len > 0) return c_->read_bytes(dl, what);
      if (dl.expired()) throw TimeoutError("store " + c_->endpoint + ": " + what + ": timed out");
    }
  });
}

int64_t TcpBackend::queue_len(std::string_view key, Duration timeout) {
  return c_->call(true, "queue_len", [&] {
    const std::string what = "queue_len " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame).type(QueryType::kQueueLen).bytes(c_->wire_key(key));
    c_->send(frame, dl, what);
    return c_->read_fixed<int64_t>(dl, what);
  });
}

std::vector<std::string> TcpBackend::list_keys(Duration timeout) {
  return c_->call(true, "list_keys", [&] {
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame).type(QueryType::kListKeys);
    c_->send(frame, dl, "list_keys");
    auto n = c_->read_fixed<int64_t>(dl, "list_keys");
    if (n < 0) c_->protocol_error("list_keys", 0);
    std::vector<std::string> keys;
    const std::string& prefix = c_->options.key_prefix;
    for (int64_t i = 0; i < n; ++i) {
      std::string k = c_->read_bytes(dl, "list_keys");
      if (k.compare(0, prefix.size(), prefix) == 0) keys.push_back(k.substr(prefix.size()));
    }
    return keys;
  });
}

void TcpBackend::barrier(std::string_view key, int64_t world_size, Duration timeout) {
  return c_->call(false, "barrier", [&] {
    const std::string what = "barrier " + util::quote(key);
    Deadline dl = c_->deadline(timeout);
    std::string frame;
    RequestWriter(frame).type(QueryType::kBarrier).bytes(c_->wire_key(key)).i64(world_size);
    c_->send(frame, dl, what);
    c_->await_stop(dl, what);
  });
}

Backend::Duration TcpBackend::ping(Duration timeout) {
  return c_->call(true, "ping", [&] {
    Deadline dl = c_->deadline(timeout);
    const auto start = Deadline::Clock::now();
    const uint32_t nonce = 0x5eed;
    std::string frame;
    RequestWriter(frame).type(QueryType::kPing).u32(nonce);
    c_->send(frame, dl, "ping");
    if (c_->read_fixed<uint32_t>(dl, "ping") != nonce) c_->protocol_error("ping", 0);
    return std::chrono::duration_cast<Duration>(Deadline::Clock::now() - start);
  });
}

std::unique_ptr<TcpBackend> TcpBackend::connect(const std::string& host, uint16_t port,
                                                StoreClientOptions options) {
  auto c = std::make_unique<Conn>();
  c->options = std::move(options);
  c->endpoints.emplace_back(host, port);
  for (const auto& s : c->options.standbys) c->endpoints.push_back(s);
  c->endpoint = util::format_endpoint(host, port);
  c->reconnect(Deadline::after(c->options.connect_timeout));
  return std::unique_ptr<TcpBackend>(new TcpBackend(std::move(c)));
}

TcpBackend::TcpBackend(std::unique_ptr<Conn> c) : c_(std::move(c)) {}
TcpBackend::~TcpBackend() = default;

const std::string& TcpBackend::endpoint() const {
  return c_->endpoint;
}

util::Socket TcpBackend::take_socket() {
  return std::move(c_->sock);
}

}  // namespace elasticrun::store
