#include "memory/snapshot.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "ckpt/crc32c.hpp"

namespace elasticrun::memory {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMagic = "elasticrun-manifest";
constexpr int kVersion = 1;

template <typename T>
bool parse_number(std::string_view text, T& out, int base = 10) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

util::Status bad(const std::string& why) {
  return util::Status(EPROTO, "manifest: " + why);
}

}  // namespace

std::string SnapshotName::str() const {
  char buf[80];
  std::snprintf(buf, sizeof buf, "step_%09lld.r%d", static_cast<long long>(step), rank);
  return world ? std::string(buf) + "of" + std::to_string(*world) : std::string(buf);
}

std::optional<SnapshotName> SnapshotName::parse(const std::string& name) {
  // step_ + 9 digits + .r + at least one digit
  if (name.size() < 17 || name.compare(0, 5, "step_") != 0 || name.compare(14, 2, ".r") != 0) {
    return std::nullopt;
  }
  SnapshotName n;
  const std::string_view digits(name.data() + 5, 9);
  std::string_view rank = std::string_view(name).substr(16);
  const size_t of = rank.find("of");
  if (of != std::string_view::npos) {
    int world = 0;
    if (!parse_number(rank.substr(of + 2), world) || world < 1) return std::nullopt;
    n.world = world;
    rank = rank.substr(0, of);
  }
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !parse_number(digits, n.step) || !parse_number(rank, n.rank) || n.rank < 0 ||
      (n.world && n.rank >= *n.world)) {
    return std::nullopt;
  }
  return n;
}

bool valid_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name.find('\n') == std::string::npos;
}

uint64_t Manifest::bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

std::string Manifest::serialize() const {
  std::string out = std::string(kMagic) + " " + std::to_string(kVersion) + " " + snapshot + "\n";
  char crc[16];
  for (const auto& f : files) {
    std::snprintf(crc, sizeof crc, "%08x", f.crc32c);
    out += std::to_string(f.size) + " " + crc + " " + f.name + "\n";
  }
  return out;
}

util::Result<Manifest> Manifest::parse(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return bad("empty");
  Manifest m;
  {
    std::istringstream head(line);
    std::string magic;
    int version = 0;
    if (!(head >> magic >> version >> m.snapshot) || magic != kMagic) {
      return bad("not a manifest: " + line.substr(0, 80));
    }
    if (version != kVersion) return bad("version " + std::to_string(version) + " is not 1");
    if (!SnapshotName::parse(m.snapshot)) return bad("not a snapshot's name: " + m.snapshot);
  }
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t a = line.find(' ');
    const size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
    if (b == std::string::npos) return bad("a line without three fields: " + line.substr(0, 80));
    ManifestFile f;
    f.name = line.substr(b + 1);
    if (!parse_number(std::string_view(line).substr(0, a), f.size) || b - a - 1 != 8 ||
        !parse_number(std::string_view(line).substr(a + 1, 8), f.crc32c, 16)) {
      return bad("a line with a bad size or checksum: " + line.substr(0, 80));
    }
    if (!valid_file_name(f.name)) return bad("a file name that is not flat: " + f.name);
    m.files.push_back(std::move(f));
  }
  if (m.files.empty()) return bad(m.snapshot + " names no file");
  return m;
}

util::Result<Manifest> Manifest::of_directory(const fs::path& dir) {
  Manifest m;
  m.snapshot = dir.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file()) {
      return util::Status(EISDIR, "manifest of " + dir.string() + ": " +
                                      entry.path().filename().string() + " is not a plain file");
    }
    ManifestFile f;
    f.name = entry.path().filename().string();
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return util::Status(errno, "open " + entry.path().string());
    std::array<std::byte, 1 << 16> buf;
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return util::Status(err, "read " + entry.path().string());
      }
      if (n == 0) break;
      f.crc32c = ckpt::crc32c(std::span(buf.data(), static_cast<size_t>(n)), f.crc32c);
      f.size += static_cast<uint64_t>(n);
    }
    ::close(fd);
    m.files.push_back(std::move(f));
  }
  if (ec) return util::Status(ec.value(), "list " + dir.string());
  std::sort(m.files.begin(), m.files.end(),
            [](const ManifestFile& a, const ManifestFile& b) { return a.name < b.name; });
  return m;
}

}  // namespace elasticrun::memory
