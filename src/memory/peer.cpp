#include "memory/peer.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <cstdio>

#include "ckpt/crc32c.hpp"
#include "elasticrun/errors.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::memory {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "/memory/v1/snapshots/";
constexpr size_t kChunk = 1 << 20;
constexpr int kWorkers = 4;

std::string manifest_path(const std::string& name) { return kPrefix + name + "/manifest"; }
std::string file_path(const std::string& name, const std::string& file) {
  return kPrefix + name + "/files/" + file;
}

// Closes its descriptor once the last copy of the provider is gone.
struct OpenFile {
  explicit OpenFile(int descriptor) : fd(descriptor) {}
  ~OpenFile() { ::close(fd); }
  int fd;
};

}  // namespace

PeerServer::PeerServer(const std::string& host, Tier& tier)
    : server_(std::make_unique<httplib::Server>()) {
  auto& s = *server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  s.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.set_payload_max_length(0);
  Tier* t = &tier;
  s.Get(R"(/memory/v1/snapshots/([^/]+)/manifest)",
        [t](const httplib::Request& req, httplib::Response& res) {
          const auto m = t->manifest(req.matches[1]);
          if (!m) {
            res.status = 404;
            return res.set_content("no such snapshot\n", "text/plain");
          }
          res.set_content(m->serialize(), "text/plain");
        });
  s.Get(R"(/memory/v1/snapshots/([^/]+)/files/([^/]+))",
        [t](const httplib::Request& req, httplib::Response& res) {
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
                std::string buf(std::min(length, kChunk), '\0');
                const ssize_t n = ::pread(open->fd, buf.data(), buf.size(),
                                          static_cast<off_t>(offset));
                if (n <= 0) return false;  // the file shrank or went: the peer sees a cut
                return sink.write(buf.data(), static_cast<size_t>(n));
              });
        });
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

util::Status fetch_snapshot(const std::string& host, int port, const std::string& name, Tier& tier,
                            std::chrono::seconds timeout) {
  const std::string peer = host + ":" + std::to_string(port);
  auto failed = [&](int err, const std::string& why) {
    return util::Status(err, "fetching " + name + " from " + peer + ": " + why);
  };
  httplib::Client cli(host, port);
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  cli.set_keep_alive(true);
  auto got = cli.Get(manifest_path(name));
  if (!got) return failed(ECONNREFUSED, "the manifest: " + httplib::to_string(got.error()));
  if (got->status != 200) return failed(ENOENT, "the peer does not hold it");
  auto parsed = Manifest::parse(got->body);
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
    auto res = cli.Get(file_path(name, f.name), [&](const char* data, size_t n) {
      crc = ckpt::crc32c(std::span(reinterpret_cast<const std::byte*>(data), n), crc);
      size += n;
      for (size_t off = 0; off < n;) {
        const ssize_t w = ::write(fd, data + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return written = false;
        off += static_cast<size_t>(w);
      }
      return true;
    });
    ::close(fd);
    std::string why;
    if (!res) {
      why = f.name + ": " + httplib::to_string(res.error());
    } else if (res->status != 200) {
      why = f.name + ": HTTP " + std::to_string(res->status);
    } else if (!written) {
      why = "writing " + to.string() + " (is the tier's file system full?)";
    } else if (size != f.size || crc != f.crc32c) {
      char want[16], have[16];
      std::snprintf(want, sizeof want, "%08x", f.crc32c);
      std::snprintf(have, sizeof have, "%08x", crc);
      why = f.name + ": " + std::to_string(size) + " bytes with CRC32C " + have + ", the manifest " +
            "says " + std::to_string(f.size) + " with " + want + " (the copy is corrupt)";
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
