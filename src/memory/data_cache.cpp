#include "memory/data_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <system_error>

#include "memory/tier.hpp"
#include "util/logging.hpp"
#include "util/unique_dir.hpp"

namespace elasticrun::memory {
namespace fs = std::filesystem;

std::unique_ptr<DataCache> DataCache::create(const fs::path& base, std::optional<uint64_t> limit) {
  const fs::path dir =
      util::make_unique_dir(base, "elasticrun-data-" + std::to_string(::getpid()) + "-");
  return std::unique_ptr<DataCache>(
      new DataCache(dir, std::min(limit.value_or(UINT64_MAX), free_bytes(dir))));
}

DataCache::~DataCache() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (ec) util::logger("memory")->warn("cannot remove {}: {}", path_.string(), ec.message());
}

}  // namespace elasticrun::memory
