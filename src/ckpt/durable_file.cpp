#include "ckpt/durable_file.hpp"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <cerrno>
#include <string>

namespace elasticrun::ckpt {
namespace {

class Fd {  // closes on scope exit; the error of close() is seen only after fsync
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

util::Status fail(const std::string& what, const std::filesystem::path& path) {
  return {errno, what + " " + path.string()};
}

util::Status write_all(int fd, std::span<const std::byte> data, const std::filesystem::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write", path);
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

util::Status write_file(const std::filesystem::path& path,
                        std::span<const std::span<const std::byte>> parts) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return fail("open", path);
  for (const auto& part : parts) {
    if (auto st = write_all(fd.get(), part, path); !st) return st;
  }
  if (::fsync(fd.get()) != 0) return fail("fsync", path);
  return {};
}

util::Status replace_file(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(text.data()),
                                         text.size()};
  if (auto st = write_file(tmp, std::span(&bytes, 1)); !st) return st;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename over", path);
  return fsync_dir(path.parent_path());
}

util::Status fsync_dir(const std::filesystem::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return fail("open directory", dir);
  if (::fsync(fd.get()) != 0) return fail("fsync directory", dir);
  return {};
}

util::Status exchange(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    return fail("exchange " + a.string() + " with", b);
  }
  return {};
}

util::Result<std::vector<std::byte>> read_at(const std::filesystem::path& path,
                                             std::uint64_t offset, std::uint64_t size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return fail("open", path);
  std::vector<std::byte> out(size);
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd.get(), out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("read", path);
    }
    if (n == 0) {
      return util::Status(EPROTO, "read " + path.string() + ": the file ends at byte " +
                                      std::to_string(offset + done) + ", before byte " +
                                      std::to_string(offset + size) + " its metadata promises");
    }
    done += static_cast<std::uint64_t>(n);
  }
  return out;
}

util::Result<std::string> read_text(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return fail("open", path);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("read", path);
    }
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace elasticrun::ckpt
