#include <algorithm>
#include <cerrno>

#include "ckpt/crc32c.hpp"
#include "ckpt/durable_file.hpp"
#include "ckpt/layout.hpp"
#include "elasticrun/checkpoint.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::ckpt {
namespace fs = std::filesystem;
namespace {

void check(const util::Status& st) {
  if (!st) throw Error("checkpoint: " + st.message());
}

template <class T>
T check(util::Result<T> r) {
  check(r ? util::Status() : r.status());
  return std::move(r).value();
}

void check_shard(const ShardView& s, int rank) {
  const auto& i = s.info;
  const std::string what = "checkpoint: rank " + std::to_string(rank) + ", tensor '" + i.name + "'";
  if (i.name.empty() || i.dtype.empty() || i.element_size == 0) {
    throw ConfigError(what + ": needs a name, a dtype and an element size");
  }
  if (std::any_of(i.shape.begin(), i.shape.end(), [](std::int64_t d) { return d < 0; })) {
    throw ConfigError(what + ": negative dimension");
  }
  if (s.row_begin < 0 || s.row_end < s.row_begin || s.row_end > i.rows()) {
    throw ConfigError(what + ": rows [" + std::to_string(s.row_begin) + ", " +
                      std::to_string(s.row_end) + ") outside its " + std::to_string(i.rows()));
  }
  if (i.replicated && (s.row_begin != 0 || s.row_end != i.rows())) {
    throw ConfigError(what + ": a replicated tensor holds all its rows");
  }
  if (s.bytes.size() != static_cast<std::size_t>(s.row_end - s.row_begin) * i.row_bytes()) {
    throw ConfigError(what + ": " + std::to_string(s.bytes.size()) + " bytes for " +
                      std::to_string(s.row_end - s.row_begin) + " rows of " +
                      std::to_string(i.row_bytes()) + " bytes");
  }
}

}  // namespace

Checkpointer::Checkpointer(fs::path root, int keep, int rank, int world_size, Barrier barrier)
    : root_(std::move(root)),
      keep_(keep),
      rank_(rank),
      world_size_(world_size),
      barrier_(std::move(barrier)) {
  if (keep_ < 1)
    throw ConfigError("checkpoint: keep must be at least 1, not " + std::to_string(keep_));
  if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
    throw ConfigError("checkpoint: rank " + std::to_string(rank_) + " of world size " +
                      std::to_string(world_size_));
  }
  if (!barrier_) {
    if (world_size_ > 1) throw ConfigError("checkpoint: a world of several ranks needs a barrier");
    barrier_ = [] {};
  }
}

fs::path Checkpointer::save(std::int64_t step, std::span<const ShardView> shards,
                            std::string_view extra_json) {
  if (step < 0) throw ConfigError("checkpoint: step " + std::to_string(step) + " is negative");
  for (const auto& s : shards) check_shard(s, rank_);
  // Refuses extra_json that is not JSON now, before anything is written.
  const std::string manifest =
      rank_ == 0 ? layout::encode_manifest(step, world_size_, extra_json) : std::string();
  FileSystem& disk = file_system();
  const fs::path final_dir = root_ / layout::step_dir(step);
  const fs::path partial = root_ / (layout::step_dir(step) + std::string(layout::kPartialSuffix));

  if (rank_ == 0) {
    // Durably: a root made here and lost in a crash would take every
    // checkpoint published in it along.
    check(make_dirs(disk, root_));
    check(disk.remove_all(partial));  // left by a save that crashed at this step
  }
  barrier_();

  // Every rank makes it, one wins. Its name needs no sync of its own: the
  // rename in publish() is what makes it visible, and root is synced then.
  if (auto st = disk.make_dir(partial); !st && st.err() != EEXIST) check(st);
  std::vector<layout::ShardRecord> records;
  std::vector<std::span<const std::byte>> parts;
  std::uint64_t offset = 0;
  for (const auto& s : shards) {
    if (s.info.replicated && rank_ != 0) continue;  // rank 0's copy is the one written
    records.push_back({s.info,
                       {layout::shard_data(rank_), offset, s.bytes.size(), crc32c(s.bytes),
                        s.row_begin, s.row_end}});
    parts.push_back(s.bytes);
    offset += s.bytes.size();
  }
  check(disk.write_file(partial / layout::shard_data(rank_), parts));
  const std::string meta = layout::encode_shard_meta(rank_, world_size_, records);
  const std::span<const std::byte> meta_bytes{reinterpret_cast<const std::byte*>(meta.data()),
                                              meta.size()};
  check(disk.write_file(partial / layout::shard_meta(rank_), std::span(&meta_bytes, 1)));
  check(disk.sync_dir(partial));
  barrier_();

  if (rank_ == 0) {
    publish(partial, final_dir, manifest);
    prune();
  }
  barrier_();
  return final_dir;
}

// Every shard is durable in `partial`; nothing is visible to a reader until
// the rename, and `latest` moves only after that. A crash before the rename
// leaves a .partial that the next save removes; a crash between the rename
// and `latest` leaves `latest` naming the previous checkpoint, which
// retention has not touched yet.
void Checkpointer::publish(const fs::path& partial, const fs::path& final_dir,
                           const std::string& manifest) const {
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(manifest.data()),
                                         manifest.size()};
  FileSystem& disk = file_system();
  check(disk.write_file(partial / layout::kManifest, std::span(&bytes, 1)));
  check(disk.sync_dir(partial));
  if (check(disk.kind(final_dir)) != FileKind::kAbsent) {
    // The same step saved again (a restart repeated it), and `latest` may
    // name it: swap atomically, so the name always holds a whole checkpoint.
    check(disk.exchange(partial, final_dir));
    check(disk.sync_dir(root_));
    check(disk.remove_all(partial));
  } else {
    check(disk.rename(partial, final_dir));
    check(disk.sync_dir(root_));
  }
  check(replace_file(disk, root_ / layout::kLatest, final_dir.filename().string() + "\n"));
}

// Removals are not synced: a crash that brings one back brings back a whole
// checkpoint that `latest` does not name, or a .partial, which the next save
// removes again.
void Checkpointer::prune() const {
  FileSystem& disk = file_system();
  const auto current = latest(root_);
  auto all = published(root_);
  if (all.size() > static_cast<std::size_t>(keep_)) {
    all.resize(all.size() - static_cast<std::size_t>(keep_));
    for (const auto& old : all) {
      if (old != current) check(disk.remove_all(old));
    }
  }
  for (const auto& entry : check(disk.list(root_))) {
    if (entry.name.starts_with("step_") && entry.name.ends_with(layout::kPartialSuffix)) {
      check(disk.remove_all(root_ / entry.name));  // crashed saves of other steps
    }
  }
}

std::optional<fs::path> latest(const fs::path& root) {
  FileSystem& disk = file_system();
  auto text = disk.read_text(root / layout::kLatest);
  if (!text) {
    if (text.status().err() == ENOENT) return std::nullopt;
    throw Error("checkpoint: " + text.status().message());
  }
  std::string name = text.value();
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (!layout::parse_step_dir(name) || check(disk.kind(root / name)) != FileKind::kDirectory) {
    throw Error("checkpoint: " + (root / layout::kLatest).string() + " names '" + name +
                "', which is not a checkpoint directory");
  }
  return root / name;
}

std::vector<fs::path> published(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  // A root that cannot be listed (not made yet) has nothing published.
  auto entries = file_system().list(root);
  if (!entries) return {};
  for (const DirEntry& entry : entries.value()) {
    if (auto step = layout::parse_step_dir(entry.name); step && entry.directory) {
      found.emplace_back(*step, root / entry.name);
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

}  // namespace elasticrun::ckpt
