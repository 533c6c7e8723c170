#include "util/socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "util/backoff.hpp"

namespace elasticrun::util {
namespace {

bool retryable_connect_error(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT;
}

const char* short_error(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "refused";
    case ECONNRESET:
      return "reset";
    case ETIMEDOUT:
      return "timed out";
    default:
      return std::strerror(err);
  }
}

// One non-blocking connect() to one address, bounded by timeout_ms.
// Returns the connected fd or -errno.
int connect_once(const addrinfo* ai, int timeout_ms) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -errno;
  int rc;
  do {
    rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0 && errno != EINPROGRESS) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  if (rc < 0) {
    pollfd pfd{fd, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&pfd, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      int err = n == 0 ? ETIMEDOUT : errno;
      ::close(fd);
      return -err;
    }
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      ::close(fd);
      return -soerr;
    }
  }
  // Back to blocking mode: all later waits go through poll() with a deadline.
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

Status wait_for(int fd, short events, Deadline deadline, const std::string& what) {
  pollfd pfd{fd, events, 0};
  for (;;) {
    int n = ::poll(&pfd, 1, deadline.poll_timeout_ms());
    if (n > 0) return Status::ok();
    if (n == 0) return Status(ETIMEDOUT, what);
    if (errno != EINTR) return Status(errno, what);
  }
}

}  // namespace

std::string format_endpoint(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Socket::~Socket() {
  close();
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
    peer_ = std::move(other.peer_);
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    // close() is not retried on EINTR: on Linux the descriptor is gone either way.
    ::close(fd_);
    fd_ = -1;
  }
}

Result<Socket> Socket::connect(const std::string& host, uint16_t port, Deadline deadline,
                               const ConnectOptions& options) {
  const std::string endpoint = format_endpoint(host, port);
  ExponentialBackoff backoff(options.initial_backoff, options.max_backoff);
  const auto start = Deadline::Clock::now();
  std::string attempts;
  int last_err = ETIMEDOUT;
  for (int attempt = 1;; ++attempt) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    int gai = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (gai != 0) {
      // Name resolution failures are not retried: a typo in --rdzv-endpoint
      // should fail in milliseconds, not after the join timeout.
      return Status(EHOSTUNREACH,
                    "connect to " + endpoint + ": cannot resolve host: " + ::gai_strerror(gai));
    }
    int fd = -1;
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int budget =
          std::min<long long>(deadline.poll_timeout_ms() < 0 ? options.attempt_timeout.count()
                                                             : deadline.poll_timeout_ms(),
                              options.attempt_timeout.count());
      fd = connect_once(ai, budget);
      if (fd >= 0) break;
      // Try every address before judging: "localhost" may resolve to ::1
      // first on a host without IPv6 (EADDRNOTAVAIL) and to 127.0.0.1 next.
      // A retryable error on any address makes the whole attempt retryable.
      if (ai == res || retryable_connect_error(-fd)) last_err = -fd;
    }
    ::freeaddrinfo(res);
    if (fd >= 0) {
      Socket s(fd);
      s.peer_ = endpoint;
      return s;
    }
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start)
            .count();
    attempts += (attempts.empty() ? "" : ", ") + std::string("#") + std::to_string(attempt) +
                " at " + std::to_string(elapsed) + "ms " + short_error(last_err);
    if (!retryable_connect_error(last_err)) {
      return Status(last_err, "connect to " + endpoint + " failed (" + attempts + ")");
    }
    auto delay = backoff.next();
    if (deadline.remaining() <= delay) {
      return Status(last_err, "connect to " + endpoint + " gave up after " +
                                  std::to_string(attempt) + " attempts (" + attempts + ")");
    }
    std::this_thread::sleep_for(delay);
  }
}

Status Socket::send_all(const void* data, size_t size, Deadline deadline) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Status st = wait_for(fd_, POLLOUT, deadline, "send to " + peer_);
      if (!st) return st;
      continue;
    }
    return Status(errno, "send to " + peer_);
  }
  return Status::ok();
}

Status Socket::recv_exact(void* data, size_t size, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    auto got = recv_some(p, size, deadline);
    if (!got) return got.status();
    if (got.value() == 0) {
      return Status(ECONNRESET, "receive from " + peer_ + ": peer closed the connection");
    }
    p += got.value();
    size -= got.value();
  }
  return Status::ok();
}

Result<size_t> Socket::recv_some(void* data, size_t capacity, Deadline deadline) {
  for (;;) {
    ssize_t n = ::recv(fd_, data, capacity, MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Status st = wait_for(fd_, POLLIN, deadline, "receive from " + peer_);
      if (!st) return st;
      continue;
    }
    return Status(errno, "receive from " + peer_);
  }
}

Result<bool> Socket::wait_readable(Deadline deadline) {
  Status st = wait_for(fd_, POLLIN, deadline, "wait for " + peer_);
  if (st) return true;
  if (st.err() == ETIMEDOUT) return false;
  return st;
}

}  // namespace elasticrun::util
