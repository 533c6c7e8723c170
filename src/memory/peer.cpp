#include "memory/peer.hpp"

#include <fcntl.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <functional>
#include <vector>

#include "ckpt/crc32c.hpp"
#include "elasticrun/errors.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"
#include "util/socket.hpp"

namespace elasticrun::memory {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "/memory/v1/snapshots/";
constexpr size_t kChunk = 4 << 20;
constexpr int kWorkers = 4;
constexpr std::chrono::seconds kConnectWithin{5};

std::string manifest_path(const std::string& name) {
  return kPrefix + name + "/manifest";
}
std::string file_path(const std::string& name, const std::string& file) {
  return kPrefix + name + "/files/" + file;
}

// Closes its descriptor once the last copy of the provider is gone.
// A file being sent, and the one buffer its pieces are read into: a
// fresh buffer per piece would be fresh pages to fault in for every 4 MiB,
// which in a virtual machine cost more than the copy.
struct OpenFile {
  explicit OpenFile(int descriptor) : fd(descriptor) {}
  ~OpenFile() { ::close(fd); }
  int fd;
  std::vector<char> buf;
};

}  // namespace

PeerServer::PeerServer(const std::string& host, Tier& tier, const std::string& secret)
    : secret_(secret), server_(std::make_unique<httplib::Server>()) {
  auto& s = *server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  s.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.set_payload_max_length(0);
  Tier* t = &tier;
  // With the secret: each request signed (util/http_auth.hpp), its nonce from /auth/nonce.
  auto guarded = [this](httplib::Server::Handler handler) -> httplib::Server::Handler {
    if (secret_.empty()) return handler;
    return
        [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
          const std::string why =
              util::check_http_authorization(secret_, nonces_, req.method, req.target, req.body,
                                             req.get_header_value("Authorization"));
          if (!why.empty()) {
            util::logger("memory")->warn("refused {} {} from {}: {}", req.method, req.path,
                                         req.remote_addr, why);
            res.status = 401;
            return res.set_content(why + "\n", "text/plain");
          }
          handler(req, res);
        };
  };
  if (!secret_.empty()) {
    s.Get(util::kAuthNoncePath, [this](const httplib::Request& req, httplib::Response& res) {
      res.set_content(nonces_.issue(req.remote_addr), "text/plain");
    });
  }
  s.Get(R"(/memory/v1/snapshots/([^/]+)/manifest)",
        guarded([t](const httplib::Request& req, httplib::Response& res) {
          const auto m = t->manifest(req.matches[1]);
          if (!m) {
            res.status = 404;
            return res.set_content("no such snapshot\n", "text/plain");
          }
          res.set_content(m->serialize(), "text/plain");
        }));
  s.Get(R"(/memory/v1/snapshots/([^/]+)/files/([^/]+))",
        guarded([t](const httplib::Request& req, httplib::Response& res) {
          const std::string name = req.matches[1], file = req.matches[2];
          const auto m = t->manifest(name);
          const bool listed =
              m && std::any_of(m->files.begin(), m->files.end(),
                               [&](const ManifestFile& f) { return f.name == file; });
          const int fd = listed ? ::open(t->file(name, file).c_str(), O_RDONLY | O_CLOEXEC) : -1;
          if (fd < 0) {
            res.status = 404;
            return res.set_content("no such file\n", "text/plain");
          }
          auto open = std::make_shared<OpenFile>(fd);
          const off_t size = ::lseek(fd, 0, SEEK_END);
          res.set_content_provider(
              static_cast<size_t>(size < 0 ? 0 : size), "application/octet-stream",
              [open](size_t offset, size_t length, httplib::DataSink& sink) {
                auto& buf = open->buf;
                if (buf.empty()) buf.resize(kChunk);
                const ssize_t n = ::pread(open->fd, buf.data(), std::min(length, buf.size()),
                                          static_cast<off_t>(offset));
                if (n <= 0) return false;  // the file shrank or went: the peer sees a cut
                return sink.write(buf.data(), static_cast<size_t>(n));
              });
        }));
  port_ = s.bind_to_any_port(host);
  if (port_ <= 0) throw NetworkError("cannot serve the memory tier on " + host + ":0");
  thread_ = util::start_quiet_thread([this] {
    server_->listen_after_bind();
    loop_ended_ = true;
  });
}

PeerServer::~PeerServer() {
  // As serve::HttpServer: stop() does nothing before the loop has begun.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!server_->is_running() && !loop_ended_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

namespace {

// One GET on a connection of its own ("Connection: close"), its body handed
// to `sink` in pieces of up to kChunk bytes (httplib's client reads a few
// KiB per system call, which held a fetch to a quarter of what loopback
// carries). Only what PeerServer answers is understood: a status line, and
// a body of Content-Length bytes. `status`: the answer's code.
util::Status http_get(const std::string& host, int port, const std::string& path,
                      const std::string& authorization, std::chrono::seconds silence, int& status,
                      const std::function<bool(const char*, size_t)>& sink) {
  const auto quiet = [&] { return util::Deadline::after(silence); };
  // A member that stopped answering is given up on soon: another may hold it.
  auto sock = util::Socket::connect(
      host, static_cast<uint16_t>(port),
      util::Deadline::after(std::min<std::chrono::milliseconds>(silence, kConnectWithin)));
  if (!sock) return sock.status();
  util::Socket& s = sock.value();
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
                        "\r\nConnection: close\r\n";
  if (!authorization.empty()) request += "Authorization: " + authorization + "\r\n";
  request += "\r\n";
  if (auto st = s.send_all(request.data(), request.size(), quiet()); !st) return st;
  std::string head;
  while (head.size() < 16384 && (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n"))) {
    char c;
    if (auto st = s.recv_exact(&c, 1, quiet()); !st) return st;
    head += c;
  }
  if (head.size() >= 16384) return util::Status(EPROTO, "GET " + path + ": headers too long");
  if (std::sscanf(head.c_str(), "HTTP/1.%*d %d", &status) != 1) {
    return util::Status(EPROTO, "GET " + path + ": not an HTTP answer");
  }
  uint64_t length = 0;
  bool has_length = false;
  for (size_t at = head.find("\r\n"); at != std::string::npos && at + 2 < head.size();) {
    const size_t end = head.find("\r\n", at + 2);
    std::string line = head.substr(at + 2, end - at - 2);
    std::transform(line.begin(), line.end(), line.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    unsigned long long n = 0;
    if (std::sscanf(line.c_str(), "content-length: %llu", &n) == 1) {
      length = n;
      has_length = true;
    }
    at = end;
  }
  if (!has_length) return util::Status(EPROTO, "GET " + path + ": no Content-Length");
  std::vector<char> buf(std::min<uint64_t>(length, kChunk));
  for (uint64_t left = length; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    if (auto st = s.recv_exact(buf.data(), n, quiet()); !st) return st;
    if (!sink(buf.data(), n)) return util::Status(EIO, "GET " + path + ": not taken");
    left -= n;
  }
  return {};
}

}  // namespace

namespace {

// Holds a transfer to a rate: after each piece, sleeps until the bytes so
// far are no ahead of `rate` since the start (or the cancel flag is set).
class Pace {
 public:
  Pace(uint64_t rate, const std::atomic<bool>* cancel) : rate_(rate), cancel_(cancel) {}
  // False once cancelled.
  bool took(size_t n) {
    sent_ += n;
    if (rate_ > 0) {
      const auto due = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(static_cast<double>(sent_) /
                                                                  static_cast<double>(rate_)));
      while (!cancelled() && std::chrono::steady_clock::now() < due) {
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            due - std::chrono::steady_clock::now(), std::chrono::milliseconds(20)));
      }
    }
    return !cancelled();
  }
  bool cancelled() const { return cancel_ && cancel_->load(std::memory_order_relaxed); }

 private:
  const uint64_t rate_;
  const std::atomic<bool>* cancel_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  uint64_t sent_ = 0;
};

}  // namespace

util::Status fetch_snapshot(const std::string& host, int port, const std::string& name, Tier& tier,
                            const FetchOptions& options) {
  const std::chrono::seconds timeout = options.timeout;
  Pace pace(options.bytes_per_second, options.cancel);
  const std::string peer = host + ":" + std::to_string(port);
  auto failed = [&](int err, const std::string& why) {
    return util::Status(err, "fetching " + name + " from " + peer + ": " + why);
  };
  int status = 0;
  // A GET, signed with the job secret when there is one (util/http_auth.hpp):
  // each takes a nonce of its own first.
  auto get = [&](const std::string& path,
                 const std::function<bool(const char*, size_t)>& sink) -> util::Status {
    std::string authorization;
    if (!options.secret.empty()) {
      std::string nonce;
      auto st = http_get(host, port, util::kAuthNoncePath, "", timeout, status,
                         [&](const char* d, size_t n) {
                           nonce.append(d, n);
                           return nonce.size() <= 128;
                         });
      if (!st) return st;
      if (status != 200) {
        return util::Status(EACCES, "the peer hands out no nonce (HTTP " + std::to_string(status) +
                                        "): it has no job secret");
      }
      if (!util::is_auth_nonce(nonce)) {
        return util::Status(EPROTO,
                            "the peer's nonce is not 64 hex digits: not an elasticrun agent?");
      }
      authorization = util::http_authorization(options.secret, "GET", path, nonce, "");
    }
    return http_get(host, port, path, authorization, timeout, status, sink);
  };
  std::string text;
  auto got = get(manifest_path(name), [&](const char* d, size_t n) {
    text.append(d, n);
    return text.size() <= (64u << 20);
  });
  if (!got) return failed(got.err(), "the manifest: " + got.message());
  if (status == 401) return failed(EACCES, "the peer refused: " + text);
  if (status != 200) return failed(ENOENT, "the peer does not hold it");
  auto parsed = Manifest::parse(text);
  if (!parsed) return failed(EPROTO, parsed.status().message());
  const Manifest m = std::move(parsed).value();
  if (m.snapshot != name) return failed(EPROTO, "the manifest is " + m.snapshot + "'s");
  auto dir = tier.begin(m);
  if (!dir) return failed(dir.status().err(), dir.status().message());
  for (const auto& f : m.files) {
    const fs::path to = dir.value() / f.name;
    const int fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      tier.abandon(m);
      return failed(errno, "create " + to.string());
    }
    uint32_t crc = 0;
    uint64_t size = 0;
    bool written = true;
    const util::Status res = get(file_path(name, f.name), [&](const char* d, size_t n) {
      if (status != 200) return false;
      if (!pace.took(n)) return false;
      crc = ckpt::crc32c(std::span(reinterpret_cast<const std::byte*>(d), n), crc);
      size += n;
      for (size_t off = 0; off < n;) {
        const ssize_t w = ::write(fd, d + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return written = false;
        off += static_cast<size_t>(w);
      }
      return true;
    });
    ::close(fd);
    std::string why;
    if (pace.cancelled()) {
      why = "stopped (the round ended)";
    } else if (status != 200 && status != 0) {
      why = f.name + ": HTTP " + std::to_string(status);
    } else if (!written) {
      why = "writing " + to.string() + " (is the tier's file system full?)";
    } else if (!res) {
      why = f.name + ": " + res.message();
    } else if (size != f.size || crc != f.crc32c) {
      char want[16], have[16];
      std::snprintf(want, sizeof want, "%08x", f.crc32c);
      std::snprintf(have, sizeof have, "%08x", crc);
      why = f.name + ": " + std::to_string(size) + " bytes with CRC32C " + have +
            ", the manifest " + "says " + std::to_string(f.size) + " with " + want +
            " (the copy is corrupt)";
    }
    if (!why.empty()) {
      tier.abandon(m);
      return failed(EIO, why);
    }
  }
  if (auto st = tier.commit(m); !st) return failed(st.err(), st.message());
  return {};
}

}  // namespace elasticrun::memory
