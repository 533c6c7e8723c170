// Test scaffolding for the store server: a Server running on its own thread,
// bound to 127.0.0.1 port 0, and a raw socket for speaking (and breaking) the
// wire protocol byte by byte.
//
// Every blocking step here is bounded by kPatience. It is a bound, not a
// measurement: a healthy server answers in microseconds, and the bound only
// turns a hang into a failure with a message.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "elasticrun/store_client.hpp"
#include "store/frame.hpp"
#include "store/protocol.hpp"
#include "store/server.hpp"

namespace elasticrun::test {

inline constexpr std::chrono::seconds kPatience{30};

// A Server on 127.0.0.1, an ephemeral port, and a thread running its loop.
class ServerFixture {
 public:
  explicit ServerFixture(store::ServerOptions options = {})
      : server_(localise(std::move(options))) {
    server_.bind();
    thread_ = std::thread([this] {
      server_.run();
      stopped_.set_value();
    });
  }
  ~ServerFixture() { stop(); }
  ServerFixture(const ServerFixture&) = delete;
  ServerFixture& operator=(const ServerFixture&) = delete;

  // Stops the server and joins its thread. Idempotent.
  void stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  // True once run() has returned (waits up to kPatience). Joins the thread.
  bool wait_until_run_returns() {
    if (!thread_.joinable()) return true;
    if (stopped_future_.wait_for(kPatience) != std::future_status::ready) return false;
    thread_.join();
    return true;
  }

  store::Server& server() { return server_; }
  uint16_t port() const { return server_.port(); }
  store::ServerStats stats() const { return server_.stats(); }

  StoreClient client(std::string key_prefix = "/") const {
    StoreClientOptions o;
    o.connect_timeout = kPatience;
    o.timeout = kPatience;
    o.key_prefix = std::move(key_prefix);
    return StoreClient::connect("127.0.0.1", port(), o);
  }

  // Polls the server's counters until pred holds or kPatience passes; returns
  // whether it held. For effects of a close, which the server sees whenever
  // its loop gets to it.
  template <typename Pred>
  bool eventually(Pred pred) const {
    const auto until = std::chrono::steady_clock::now() + kPatience;
    while (!pred(stats())) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  // Waits until the server has taken up at least `count` requests in total.
  // The loop is single-threaded, so a request counted here has been handled
  // before any request the caller sends afterwards on another connection.
  bool requests_reach(uint64_t count) const {
    return eventually([&](const store::ServerStats& s) { return s.requests >= count; });
  }

 private:
  static store::ServerOptions localise(store::ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    return o;
  }

  store::Server server_;
  std::promise<void> stopped_;
  std::shared_future<void> stopped_future_ = stopped_.get_future().share();
  std::thread thread_;
};

// A plain TCP connection to the server, for sending arbitrary bytes. Throws
// std::runtime_error on failures the test did not ask for, so it can be used
// from helper threads as well.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) fail("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (errno != EINTR) fail("connect");
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawConnection() { close(); }
  RawConnection(RawConnection&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawConnection& operator=(RawConnection&&) = delete;
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Sends everything; false if the server has closed the connection (a test
  // of bad input may be cut off mid-send).
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return false;
      if (n < 0) fail("send");
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads exactly n bytes; throws on EOF, error or when kPatience passes.
  std::string read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    const auto until = std::chrono::steady_clock::now() + kPatience;
    while (got < n) {
      if (!readable_before(until)) {
        throw std::runtime_error("no reply within the test's patience (" + std::to_string(got) +
                                 " of " + std::to_string(n) + " bytes)");
      }
      ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) throw std::runtime_error("server closed the connection");
      if (r < 0) fail("recv");
      got += static_cast<size_t>(r);
    }
    return out;
  }
  uint8_t read_u8() { return static_cast<uint8_t>(read(1)[0]); }
  uint32_t read_u32() { return decode<uint32_t>(read(4)); }
  int64_t read_i64() { return decode<int64_t>(read(8)); }
  std::string read_bytes() {
    auto len = decode<uint64_t>(read(8));
    if (len > (1u << 20)) throw std::runtime_error("reply length " + std::to_string(len));
    return read(len);
  }

  // True once the server has closed the connection (EOF or reset), reading
  // and discarding anything before it; false if it is still open after
  // kPatience.
  bool closed_by_server() {
    const auto until = std::chrono::steady_clock::now() + kPatience;
    char buf[4096];
    for (;;) {
      if (!readable_before(until)) return false;
      ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r == 0) return true;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return errno == ECONNRESET;
    }
  }

  // True if nothing at all is waiting to be read right now.
  bool nothing_pending() {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  template <typename T>
  static T decode(const std::string& s) {
    T v{};
    std::memcpy(&v, s.data(), sizeof(T));
    return v;
  }

  bool readable_before(std::chrono::steady_clock::time_point until) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) fail("poll");
    }
  }

  [[noreturn]] static void fail(const char* what) {
    throw std::runtime_error(std::string("raw connection: ") + what + ": " + std::strerror(errno));
  }

  int fd_ = -1;
};

// Request frames, built with the same writer the client uses.
namespace frames {

using store::QueryType;
using store::RequestWriter;

inline std::string validate(uint32_t magic = store::kValidationMagic) {
  std::string s;
  RequestWriter(s).type(QueryType::kValidate).u32(magic);
  return s;
}
inline std::string ping(uint32_t nonce) {
  std::string s;
  RequestWriter(s).type(QueryType::kPing).u32(nonce);
  return s;
}
inline std::string set(std::string_view key, std::string_view value) {
  std::string s;
  RequestWriter(s).type(QueryType::kSet).bytes(key).bytes(value);
  return s;
}
inline std::string get(std::string_view key) {
  std::string s;
  RequestWriter(s).type(QueryType::kGet).bytes(key);
  return s;
}
// WAIT, CHECK or MULTI_GET: a count and that many keys.
inline std::string keyed(QueryType type, const std::vector<std::string>& keys) {
  std::string s;
  RequestWriter w(s);
  w.type(type).u64(keys.size());
  for (const auto& k : keys) w.bytes(k);
  return s;
}
inline std::string wait(const std::vector<std::string>& keys) {
  return keyed(QueryType::kWait, keys);
}
inline std::string cancel_wait() {
  std::string s;
  RequestWriter(s).type(QueryType::kCancelWait);
  return s;
}

}  // namespace frames

// Lets a test open thousands of sockets: raises the soft limit on open files
// to the hard limit. Returns the soft limit now in force.
inline rlim_t raise_open_file_limit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

// --- Checks shared by the server tests (they use Catch's macros, so only
// from the main thread).

inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;

// A raw connection past the handshake, so the server has settled on the
// modern dialect and reads the next bytes as PyTorch >= 2.2 requests.
inline RawConnection modern_connection(const ServerFixture& fx) {
  RawConnection c(fx.port());
  c.send(frames::validate() + frames::ping(0xC0FFEE));
  REQUIRE(c.read_u32() == 0xC0FFEE);
  return c;
}

// A connection that was open before some bad input and one opened after it
// both still work, and see each other's writes.
inline void require_store_still_serves(const ServerFixture& fx, StoreClient& before) {
  static int round = 0;
  const std::string key = "still-serves-" + std::to_string(++round);
  before.set(key, "yes");
  StoreClient after = fx.client();
  CHECK(after.get(key) == "yes");
  CHECK(after.add(key + "-n", 1) == 1);
  CHECK(before.add(key + "-n", 1) == 2);
}

// The server closed this connection and counted it as dropped, once.
inline void require_dropped(const ServerFixture& fx, RawConnection& raw, uint64_t dropped_before) {
  CHECK(raw.closed_by_server());
  CHECK(fx.eventually([&](const auto& s) { return s.connections_dropped > dropped_before; }));
  CHECK(fx.stats().connections_dropped == dropped_before + 1);
}

// A request type byte on its own, for numberings RequestWriter does not know.
inline std::string type_byte(uint8_t type) {
  return std::string(1, static_cast<char>(type));
}

}  // namespace elasticrun::test
