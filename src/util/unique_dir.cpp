#include "util/unique_dir.hpp"

#include <random>
#include <system_error>

#include "elasticrun/errors.hpp"

namespace elasticrun::util {
namespace fs = std::filesystem;

std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < 8; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

fs::path make_unique_dir(const fs::path& base, const std::string& prefix, bool owner_only) {
  for (int tries = 0; tries < 100; ++tries) {
    const fs::path dir = base / (prefix + random_suffix());
    std::error_code ec;
    if (fs::create_directory(dir, ec)) {
      if (owner_only) fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
      if (ec) {
        fs::remove(dir);
        throw Error("cannot make " + dir.string() + " owner-only: " + ec.message());
      }
      return dir;
    }
    if (ec) throw Error("cannot make the directory " + dir.string() + ": " + ec.message());
  }
  throw Error("cannot make a directory " + (base / prefix).string() + "*: a hundred names taken");
}

}  // namespace elasticrun::util
