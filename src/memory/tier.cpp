#include "memory/tier.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>

#include "elasticrun/errors.hpp"
#include "util/logging.hpp"
#include "util/unique_dir.hpp"

namespace elasticrun::memory {
namespace fs = std::filesystem;

fs::path Tier::default_base(const fs::path& fallback) {
  return ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fallback;
}

uint64_t free_bytes(const fs::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::unique_ptr<Tier> Tier::create(const fs::path& base, std::optional<uint64_t> limit,
                                   ShardPruning pruning) {
  const fs::path dir =
      util::make_unique_dir(base, "elasticrun-mem-" + std::to_string(::getpid()) + "-");
  return std::unique_ptr<Tier>(
      new Tier(dir, std::min(limit.value_or(UINT64_MAX), free_bytes(dir)), pruning));
}

Tier::~Tier() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (ec) util::logger("memory")->warn("cannot remove {}: {}", path_.string(), ec.message());
}

Tier::Holding Tier::adopt() {
  auto log = util::logger("memory");
  std::error_code ec;
  std::vector<std::pair<SnapshotName, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(path_, ec)) {
    const std::string name = entry.path().filename().string();
    const auto parsed = SnapshotName::parse(name);
    // A snapshot is published by renaming its directory after its
    // .metadata was written: without one it is no snapshot.
    if (parsed && entry.is_directory() && fs::exists(entry.path() / ".metadata")) {
      found.emplace_back(*parsed, entry.path());
    } else {
      fs::remove_all(entry.path(), ec);  // half-written (a worker died), or a stray
    }
  }
  std::lock_guard lock(mu_);
  int64_t newest = 0, newest_whole = 0;
  // (world, rank) -> the steps of its shards here, newest first.
  std::map<std::pair<int, int>, std::set<int64_t, std::greater<>>> shard_steps;
  for (const auto& [n, p] : found) {
    newest = std::max(newest, n.step);
    if (!n.world) {
      newest_whole = std::max(newest_whole, n.step);
    } else {
      shard_steps[{*n.world, n.rank}].insert(n.step);
    }
  }
  Holding h;
  for (const auto& [n, p] : found) {
    const std::string name = p.filename().string();
    // A rank's two newest shards: the newest may be a set another rank
    // never finished (it died saving), the one before it whole. Under
    // replication every one: the replicator prunes them by the safe step,
    // which lags several saves behind when saves come faster than it copies.
    const auto kept_shard = [&] {
      if (pruning_ == ShardPruning::kReplicator) return true;
      const auto& steps = shard_steps[{*n.world, n.rank}];
      return std::distance(steps.begin(), steps.find(n.step)) < 2;
    };
    const bool superseded = (fetched_.count(name) && !n.world && n.step < newest) ||
                            (!n.world && n.step < newest_whole) || (n.world && !kept_shard());
    if (superseded) {
      manifests_.erase(name);
      fetched_.erase(name);
      fs::remove_all(p, ec);
      continue;
    }
    if (!manifests_.count(name)) {
      auto m = Manifest::of_directory(p);
      if (!m) {
        log->warn("not keeping the snapshot {}: {}", name, m.status().message());
        fs::remove_all(p, ec);
        continue;
      }
      manifests_.emplace(name, std::move(m).value());
    }
    h.snapshots.push_back(name);
    h.step = std::max(h.step, n.step);
  }
  forget_all_but(std::set<std::string>(h.snapshots.begin(), h.snapshots.end()));
  return holding();
}

Tier::Holding Tier::scan() {
  auto log = util::logger("memory");
  std::error_code ec;
  std::set<std::string> found;
  std::vector<std::pair<std::string, fs::path>> fresh;
  {
    std::lock_guard lock(mu_);
    for (const auto& entry : fs::directory_iterator(path_, ec)) {
      const std::string name = entry.path().filename().string();
      std::error_code ignored;
      if (!SnapshotName::parse(name) || !entry.is_directory(ignored) ||
          !fs::exists(entry.path() / ".metadata", ignored)) {
        continue;  // being written (by a worker or a fetch), or a stray
      }
      found.insert(name);
      if (!manifests_.count(name)) fresh.emplace_back(name, entry.path());
    }
  }
  // The checksums, outside the lock: the peer server's threads read
  // manifests meanwhile.
  std::vector<Manifest> made;
  for (const auto& [name, p] : fresh) {
    auto m = Manifest::of_directory(p);
    if (m) {
      made.push_back(std::move(m).value());
    } else {
      found.erase(name);  // pruned while we read it; a stray is left for adopt()
      log->debug("not listing the snapshot {} yet: {}", name, m.status().message());
    }
  }
  std::lock_guard lock(mu_);
  for (auto& m : made) manifests_.emplace(m.snapshot, std::move(m));
  forget_all_but(found);
  return holding();
}

util::Status Tier::verify(const std::string& snapshot) {
  const auto want = manifest(snapshot);
  if (!want) return util::Status(ENOENT, snapshot + ": not in the memory tier");
  auto have = Manifest::of_directory(path_ / snapshot);
  std::string why;
  if (!have) {
    why = have.status().message();
  } else {
    for (const auto& f : want->files) {
      const auto it = std::find_if(have.value().files.begin(), have.value().files.end(),
                                   [&](const ManifestFile& h) { return h.name == f.name; });
      if (it == have.value().files.end()) {
        why = f.name + " is gone";
      } else if (it->size != f.size || it->crc32c != f.crc32c) {
        why = f.name + " changed in memory since its checksum was made";
      }
      if (!why.empty()) break;
    }
  }
  if (why.empty()) return {};
  remove_if([&](const SnapshotName& n) { return n.str() == snapshot; });
  return util::Status(EIO, snapshot + ": " + why + "; removed, not loaded");
}

bool Tier::fetched(const std::string& snapshot) const {
  std::lock_guard lock(mu_);
  return fetched_.count(snapshot) > 0;
}

size_t Tier::remove_shards_before(int64_t step) {
  return remove_if([step](const SnapshotName& n) { return n.world && n.step < step; });
}

size_t Tier::remove_newer_than(int64_t step) {
  return remove_if([step](const SnapshotName& n) { return n.step > step; });
}

size_t Tier::remove_if(const std::function<bool(const SnapshotName&)>& doomed) {
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mu_);
    for (auto it = manifests_.begin(); it != manifests_.end();) {
      const auto n = SnapshotName::parse(it->first);
      if (n && doomed(*n)) {
        gone.push_back(it->first);
        fetched_.erase(it->first);
        it = manifests_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::error_code ec;
  for (const auto& name : gone) fs::remove_all(path_ / name, ec);
  return gone.size();
}

void Tier::forget_all_but(const std::set<std::string>& kept) {
  for (auto it = manifests_.begin(); it != manifests_.end();) {
    if (!kept.count(it->first)) {
      fetched_.erase(it->first);
      it = manifests_.erase(it);
    } else {
      ++it;
    }
  }
}

Tier::Holding Tier::holding() const {
  Holding h;
  for (const auto& [name, m] : manifests_) {  // a std::map: sorted
    h.snapshots.push_back(name);
    if (fetched_.count(name)) h.fetched.push_back(name);
    if (const auto n = SnapshotName::parse(name)) h.step = std::max(h.step, n->step);
  }
  return h;
}

std::optional<Manifest> Tier::manifest(const std::string& snapshot) const {
  std::lock_guard lock(mu_);
  auto it = manifests_.find(snapshot);
  if (it == manifests_.end()) return std::nullopt;
  return it->second;
}

fs::path Tier::file(const std::string& snapshot, const std::string& file) const {
  return path_ / snapshot / file;
}

uint64_t Tier::held_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, m] : manifests_) n += m.bytes();
  return n;
}

util::Result<fs::path> Tier::begin(const Manifest& m) {
  {
    std::lock_guard lock(mu_);
    const uint64_t held = held_bytes();
    if (m.bytes() + held > limit_) {
      return util::Status(ENOSPC, "the memory tier holds at most " + std::to_string(limit_) +
                                      " bytes; " + m.snapshot + " takes " +
                                      std::to_string(m.bytes()) + " beside the " +
                                      std::to_string(held) + " held");
    }
  }
  const fs::path dir = path_ / (m.snapshot + kPartialSuffix);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!fs::create_directory(dir, ec)) return util::Status(ec.value(), "mkdir " + dir.string());
  return dir;
}

util::Status Tier::commit(const Manifest& m) {
  const fs::path from = path_ / (m.snapshot + kPartialSuffix);
  const fs::path to = path_ / m.snapshot;
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::rename(from, to, ec);
  if (ec) return util::Status(ec.value(), "rename " + from.string() + " to " + to.string());
  std::lock_guard lock(mu_);
  manifests_[m.snapshot] = m;
  fetched_.insert(m.snapshot);
  return {};
}

void Tier::abandon(const Manifest& m) {
  std::error_code ec;
  fs::remove_all(path_ / (m.snapshot + kPartialSuffix), ec);
}

}  // namespace elasticrun::memory
