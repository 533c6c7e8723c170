#include <algorithm>
#include <cstring>
#include <map>

#include "ckpt/crc32c.hpp"
#include "ckpt/durable_file.hpp"
#include "ckpt/layout.hpp"
#include "elasticrun/checkpoint.hpp"
#include "elasticrun/errors.hpp"

namespace elasticrun::ckpt {
namespace fs = std::filesystem;
namespace {

std::string text_of(const fs::path& path) {
  auto text = file_system().read_text(path);
  if (!text) throw Error("checkpoint: " + text.status().message());
  return std::move(text).value();
}

std::string rows_text(std::int64_t begin, std::int64_t end) {
  return "rows [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

bool same_tensor(const TensorInfo& a, const TensorInfo& b) {
  return a.dtype == b.dtype && a.element_size == b.element_size && a.shape == b.shape &&
         a.replicated == b.replicated;
}

}  // namespace

Reader::Reader(fs::path dir) : dir_(std::move(dir)) {
  const auto manifest = layout::decode_manifest(text_of(dir_ / layout::kManifest),
                                                (dir_ / layout::kManifest).string());
  step_ = manifest.step;
  world_size_ = manifest.world_size;
  extra_json_ = manifest.extra_json;

  std::map<std::string, Entry, std::less<>> by_name;
  for (int rank = 0; rank < world_size_; ++rank) {
    const fs::path file = dir_ / layout::shard_meta(rank);
    for (auto& r : layout::decode_shard_meta(text_of(file), rank, world_size_, file.string())) {
      auto [it, fresh] = by_name.try_emplace(r.info.name, Entry{r.info, {}});
      if (!fresh && !same_tensor(it->second.info, r.info)) {
        throw Error("checkpoint: " + file.string() + ": tensor '" + r.info.name +
                    "' has another dtype or shape than in the shards before it");
      }
      it->second.records.push_back(std::move(r.where));
    }
  }
  for (auto& [name, entry] : by_name) {
    std::sort(entry.records.begin(), entry.records.end(),
              [](const Record& a, const Record& b) { return a.row_begin < b.row_begin; });
    entries_.push_back(std::move(entry));
  }
}

std::vector<TensorInfo> Reader::tensors() const {
  std::vector<TensorInfo> out;
  for (const auto& e : entries_) out.push_back(e.info);
  return out;
}

const TensorInfo& Reader::tensor(std::string_view name) const {
  const auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const Entry& e, std::string_view n) { return e.info.name < n; });
  if (it == entries_.end() || it->info.name != name) {
    throw Error("checkpoint " + dir_.string() + " has no tensor '" + std::string(name) + "'");
  }
  return it->info;
}

std::vector<std::byte> Reader::read_record(const Record& record) const {
  const fs::path file = dir_ / record.file;
  auto bytes = file_system().read_at(file, record.offset, record.size);
  if (!bytes) throw Error("checkpoint: " + bytes.status().message());
  const std::uint32_t crc = crc32c(bytes.value());
  if (crc != record.crc32c) {
    char detail[96];
    std::snprintf(detail, sizeof detail, "CRC32C 0x%08x, expected 0x%08x", crc, record.crc32c);
    throw Error("checkpoint: " + file.string() + ": bytes [" + std::to_string(record.offset) +
                ", " + std::to_string(record.offset + record.size) + ") (" +
                rows_text(record.row_begin, record.row_end) + "): " + detail +
                ": the shard is corrupt");
  }
  return std::move(bytes).value();
}

void Reader::read_rows(std::string_view name, std::int64_t begin, std::int64_t end,
                       std::span<std::byte> out) const {
  const TensorInfo& info = tensor(name);
  const auto& entry = *std::find_if(entries_.begin(), entries_.end(),
                                    [&](const Entry& e) { return e.info.name == name; });
  const std::size_t row_bytes = info.row_bytes();
  if (begin < 0 || end < begin || end > info.rows()) {
    throw ConfigError("checkpoint: " + rows_text(begin, end) + " of tensor '" + info.name +
                      "', which has " + std::to_string(info.rows()));
  }
  if (out.size() != static_cast<std::size_t>(end - begin) * row_bytes) {
    throw ConfigError("checkpoint: a buffer of " + std::to_string(out.size()) + " bytes for " +
                      rows_text(begin, end) + " of '" + info.name + "'");
  }
  std::int64_t next = begin;  // rows below it are copied; records are sorted by row_begin
  for (const Record& r : entry.records) {
    if (next >= end) break;
    if (r.row_end <= next || r.row_begin >= end) continue;
    if (r.row_begin > next) break;  // a gap, reported below
    const std::vector<std::byte> bytes = read_record(r);
    const std::int64_t stop = std::min(end, r.row_end);
    std::memcpy(out.data() + static_cast<std::size_t>(next - begin) * row_bytes,
                bytes.data() + static_cast<std::size_t>(next - r.row_begin) * row_bytes,
                static_cast<std::size_t>(stop - next) * row_bytes);
    next = stop;
  }
  if (next < end) {
    throw Error("checkpoint " + dir_.string() + ": no shard holds " + rows_text(next, end) +
                " of tensor '" + info.name + "'");
  }
}

void Reader::verify() const {
  for (const auto& e : entries_) {
    for (const auto& r : e.records) read_record(r);
  }
}

}  // namespace elasticrun::ckpt
