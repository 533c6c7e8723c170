#include "ckpt/durable_file.hpp"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

namespace elasticrun::ckpt {
namespace fs = std::filesystem;
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

util::Status fail(const std::string& what, const fs::path& path) {
  return {errno, what + " " + path.string()};
}

util::Status fail(const std::string& what, const fs::path& path, const std::error_code& ec) {
  return {ec.value(), what + " " + path.string()};
}

util::Status write_all(int fd, std::span<const std::byte> data, const fs::path& path) {
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

// The machine's file system, through POSIX calls.
class PosixFileSystem final : public FileSystem {
 public:
  util::Status write_file(const fs::path& path,
                          std::span<const std::span<const std::byte>> parts) override {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return fail("open", path);
    for (const auto& part : parts) {
      if (auto st = write_all(fd.get(), part, path); !st) return st;
    }
    if (::fsync(fd.get()) != 0) return fail("fsync", path);
    return {};
  }

  util::Status make_dir(const fs::path& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return fail("create directory", path);
    return {};
  }

  util::Status rename(const fs::path& from, const fs::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return fail("rename " + from.string() + " to", to);
    return {};
  }

  util::Status exchange(const fs::path& a, const fs::path& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
      return fail("exchange " + a.string() + " with", b);
    }
    return {};
  }

  util::Status remove_all(const fs::path& path) override {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) return fail("remove", path, ec);
    return {};
  }

  util::Status sync_dir(const fs::path& dir) override {
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) return fail("open directory", dir);
    if (::fsync(fd.get()) != 0) return fail("fsync directory", dir);
    return {};
  }

  util::Result<FileKind> kind(const fs::path& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return FileKind::kAbsent;
      return fail("stat", path);
    }
    return S_ISDIR(st.st_mode) ? FileKind::kDirectory : FileKind::kFile;
  }

  util::Result<std::vector<DirEntry>> list(const fs::path& dir) override {
    std::vector<DirEntry> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;  // an entry removed meanwhile is simply not a directory
      out.push_back({it->path().filename().string(), it->is_directory(type_ec)});
    }
    if (ec) return fail("list", dir, ec);
    return out;
  }

  util::Result<std::vector<std::byte>> read_at(const fs::path& path, std::uint64_t offset,
                                               std::uint64_t size) override {
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

  util::Result<std::string> read_text(const fs::path& path) override {
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
};

PosixFileSystem posix;
FileSystem* current = &posix;

}  // namespace

FileSystem& file_system() {
  return *current;
}

ScopedFileSystem::ScopedFileSystem(FileSystem& fs) : previous_(current) {
  current = &fs;
}

ScopedFileSystem::~ScopedFileSystem() {
  current = previous_;
}

util::Status replace_file(FileSystem& fs, const fs::path& path, std::string_view text) {
  const fs::path tmp = path.string() + ".tmp";
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(text.data()),
                                         text.size()};
  if (auto st = fs.write_file(tmp, std::span(&bytes, 1)); !st) return st;
  if (auto st = fs.rename(tmp, path); !st) return st;
  return fs.sync_dir(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

util::Status make_dirs(FileSystem& fs, const fs::path& dir) {
  std::vector<fs::path> missing;  // deepest first
  for (fs::path p = dir.has_filename() ? dir : dir.parent_path(); !p.empty(); p = p.parent_path()) {
    auto k = fs.kind(p);
    if (!k) return k.status();
    if (k.value() == FileKind::kDirectory) break;
    if (k.value() == FileKind::kFile) return {ENOTDIR, "create directory " + p.string()};
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    // EEXIST: another rank or process made it meanwhile; sync its name all the same.
    if (auto st = fs.make_dir(*it); !st && st.err() != EEXIST) return st;
    const fs::path parent = it->parent_path();
    if (auto st = fs.sync_dir(parent.empty() ? fs::path(".") : parent); !st) return st;
  }
  return {};
}

}  // namespace elasticrun::ckpt
