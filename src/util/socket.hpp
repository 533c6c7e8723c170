// The one blocking TCP socket type. Nothing else in elasticrun calls
// connect(), send(), recv() or poll() on a TCP socket directly (the store
// server's sockets belong to libuv).
//
// Every blocking call takes a Deadline. Sockets are CLOEXEC and NODELAY;
// sends never raise SIGPIPE; EINTR is retried.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/deadline.hpp"
#include "util/result.hpp"

namespace elasticrun::util {

struct ConnectOptions {
  // Backoff between attempts; each delay is drawn with jitter (util/backoff.hpp).
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{1000};
  // Upper bound for one connect() attempt, so a black-holed SYN does not eat
  // the whole deadline in a single try.
  std::chrono::milliseconds attempt_timeout{5000};
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.release()), peer_(std::move(other.peer_)) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Resolves host and connects, retrying with backoff only when the peer
  // refused, reset or did not answer (ECONNREFUSED, ECONNRESET, ETIMEDOUT):
  // the store may simply not be up yet. Any other error fails at once. The
  // error context lists every attempt.
  static Result<Socket> connect(const std::string& host, uint16_t port, Deadline deadline,
                                const ConnectOptions& options = {});

  Status send_all(const void* data, size_t size, Deadline deadline);
  // Reads exactly size bytes. A peer that closes first yields ECONNRESET.
  Status recv_exact(void* data, size_t size, Deadline deadline);
  // Reads what has arrived, at most `capacity` bytes, waiting until the
  // deadline for the first: the count, 0 at EOF; ETIMEDOUT at the deadline.
  Result<size_t> recv_some(void* data, size_t capacity, Deadline deadline);
  // True when a read would not block (data or EOF), false at the deadline.
  Result<bool> wait_readable(Deadline deadline);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();
  // "host:port" of the peer this socket was connected to.
  const std::string& peer() const { return peer_; }

 private:
  int fd_ = -1;
  std::string peer_;
};

// "host:port", with brackets around IPv6 literals.
std::string format_endpoint(const std::string& host, uint16_t port);

}  // namespace elasticrun::util
