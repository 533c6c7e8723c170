// The blocking socket type: connect with retries, exact sends and receives.
#include "util/socket.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace elasticrun::util;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// A TCP socket bound to 127.0.0.1 on a kernel-chosen port. Until listen() is
// called, connects to the port are refused, and the port stays ours, so no
// other process can take it between the test's steps.
class BoundPort {
 public:
  BoundPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~BoundPort() { ::close(fd_); }
  BoundPort(const BoundPort&) = delete;
  BoundPort& operator=(const BoundPort&) = delete;

  uint16_t port() const { return port_; }
  // Safe to call from another thread (no Catch2 macros).
  bool listen() { return ::listen(fd_, 16) == 0; }
  Socket accept() { return Socket(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A connected pair over real loopback TCP.
struct Loopback {
  BoundPort port;
  Socket client;
  Socket server;
  Loopback() {
    REQUIRE(port.listen());
    auto c = Socket::connect("127.0.0.1", port.port(), Deadline::after(5s));
    REQUIRE(c.is_ok());
    client = std::move(c).value();
    server = port.accept();
    REQUIRE(server.valid());
  }
};

}  // namespace

TEST_CASE("connecting to a port nobody listens on is retried, then fails with every attempt listed",
          "[socket]") {
  BoundPort port;
  ConnectOptions options;
  options.initial_backoff = 10ms;
  options.max_backoff = 40ms;
  auto r = Socket::connect("127.0.0.1", port.port(), Deadline::after(300ms), options);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().err() == ECONNREFUSED);
  const std::string& context = r.status().context();
  INFO(context);
  CHECK_THAT(context, Contains("127.0.0.1:" + std::to_string(port.port())));
  CHECK_THAT(context, Contains("#1 ") && Contains("#2 ") && Contains("refused"));
  CHECK_THAT(context, Contains("attempts"));
}

TEST_CASE("connect succeeds when the listener appears after a while", "[socket]") {
  BoundPort port;
  bool listening = false;
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    listening = port.listen();
  });
  ConnectOptions options;
  options.initial_backoff = 10ms;
  options.max_backoff = 50ms;
  auto r = Socket::connect("127.0.0.1", port.port(), Deadline::after(30s), options);
  late.join();
  REQUIRE(listening);
  INFO((r.is_ok() ? std::string() : r.status().message()));
  REQUIRE(r.is_ok());
  Socket s = std::move(r).value();
  CHECK(s.valid());
  CHECK(s.peer() == "127.0.0.1:" + std::to_string(port.port()));
  Socket accepted = port.accept();
  CHECK(accepted.valid());
}

TEST_CASE("a host that does not resolve fails at once, naming the host", "[socket]") {
  auto r = Socket::connect("no-such-host.invalid", 29500, Deadline::after(10s));
  REQUIRE_FALSE(r.is_ok());
  const std::string& context = r.status().context();
  INFO(context);
  CHECK_THAT(context, Contains("no-such-host.invalid"));
  CHECK_THAT(context, Contains("resolve"));
  // A retried connect reports "gave up after N attempts" instead.
  CHECK_THAT(context, !Contains("attempt"));
}

TEST_CASE("send_all and recv_exact move a large buffer intact over loopback", "[socket]") {
  Loopback lo;
  // Larger than socket buffers, so both sides have to wait for each other.
  std::string sent(8 << 20, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>((i * 7919) >> 3);
  Status send_status;
  std::thread sender(
      [&] { send_status = lo.client.send_all(sent.data(), sent.size(), Deadline::after(60s)); });
  std::string got(sent.size(), '\0');
  Status recv_status = lo.server.recv_exact(got.data(), got.size(), Deadline::after(60s));
  sender.join();
  CHECK(send_status.is_ok());
  REQUIRE(recv_status.is_ok());
  CHECK(got == sent);

  // And back the other way, a few bytes.
  REQUIRE(lo.server.send_all("pong", 4, Deadline::after(5s)).is_ok());
  char back[4];
  REQUIRE(lo.client.recv_exact(back, 4, Deadline::after(5s)).is_ok());
  CHECK(std::string(back, 4) == "pong");
}

TEST_CASE("send_all and recv_exact work over a socketpair", "[socket]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  Socket a(fds[0]);
  Socket b(fds[1]);
  const std::string msg("hello\0world", 11);
  REQUIRE(a.send_all(msg.data(), msg.size(), Deadline::after(5s)).is_ok());
  std::string got(msg.size(), 'x');
  REQUIRE(b.recv_exact(got.data(), got.size(), Deadline::after(5s)).is_ok());
  CHECK(got == msg);
}

TEST_CASE("recv_exact from a peer that closes early fails with ECONNRESET", "[socket]") {
  Loopback lo;
  REQUIRE(lo.server.send_all("abc", 3, Deadline::after(5s)).is_ok());
  lo.server.close();
  char buf[8];
  Status st = lo.client.recv_exact(buf, sizeof(buf), Deadline::after(5s));
  CHECK(st.err() == ECONNRESET);
  CHECK_FALSE(st.context().empty());
}

TEST_CASE("recv_exact with nothing arriving fails with ETIMEDOUT at the deadline", "[socket]") {
  Loopback lo;
  char buf[1];
  Status st = lo.client.recv_exact(buf, 1, Deadline::after(50ms));
  CHECK(st.err() == ETIMEDOUT);
}

TEST_CASE("wait_readable is false at the deadline and true once data or EOF arrives", "[socket]") {
  Loopback lo;
  auto r = lo.client.wait_readable(Deadline::after(50ms));
  REQUIRE(r.is_ok());
  CHECK_FALSE(r.value());

  REQUIRE(lo.server.send_all("x", 1, Deadline::after(5s)).is_ok());
  r = lo.client.wait_readable(Deadline::after(5s));
  REQUIRE(r.is_ok());
  CHECK(r.value());

  char c;
  REQUIRE(lo.client.recv_exact(&c, 1, Deadline::after(5s)).is_ok());
  lo.server.close();
  r = lo.client.wait_readable(Deadline::after(5s));
  REQUIRE(r.is_ok());
  CHECK(r.value());
}

TEST_CASE("a moved-from socket is invalid and the moved-to one owns the descriptor", "[socket]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  Socket a(fds[0]);
  Socket peer(fds[1]);
  Socket b(std::move(a));
  CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CHECK(b.fd() == fds[0]);
  Socket c;
  c = std::move(b);
  CHECK_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  REQUIRE(c.send_all("z", 1, Deadline::after(5s)).is_ok());
  char z;
  REQUIRE(peer.recv_exact(&z, 1, Deadline::after(5s)).is_ok());
  CHECK(z == 'z');
}

TEST_CASE("format_endpoint brackets IPv6 literals only", "[socket]") {
  CHECK(format_endpoint("127.0.0.1", 29500) == "127.0.0.1:29500");
  CHECK(format_endpoint("node-7.cluster", 80) == "node-7.cluster:80");
  CHECK(format_endpoint("::1", 29500) == "[::1]:29500");
  CHECK(format_endpoint("fe80::1%eth0", 1) == "[fe80::1%eth0]:1");
}
