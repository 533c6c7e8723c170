#include "ckpt/layout.hpp"

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "elasticrun/errors.hpp"

namespace elasticrun::ckpt::layout {
namespace {

using nlohmann::json;

std::string numbered(const char* pattern, std::int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, pattern, static_cast<long long>(n));
  return buf;
}

json parse(std::string_view text, const std::string& file) {
  try {
    json j = json::parse(text);
    if (j.value("format", "") != kFormat) throw Error(file + ": not an elasticrun checkpoint file");
    if (j.value("version", 0) != kVersion) {
      throw Error(file + ": checkpoint format version " + j.value("version", json()).dump() +
                  ", this build reads version " + std::to_string(kVersion));
    }
    return j;
  } catch (const json::exception& e) {
    throw Error(file + ": unreadable checkpoint metadata: " + e.what());
  }
}

}  // namespace

std::string step_dir(std::int64_t step) {
  return numbered("step_%09lld", step);
}
std::string shard_data(int rank) {
  return numbered("shard_%05lld.bin", rank);
}
std::string shard_meta(int rank) {
  return numbered("shard_%05lld.json", rank);
}

std::optional<std::int64_t> parse_step_dir(std::string_view name) {
  constexpr std::string_view prefix = "step_";
  if (!name.starts_with(prefix) || name.size() < prefix.size() + 9) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

std::string encode_shard_meta(int rank, int world_size, const std::vector<ShardRecord>& records) {
  json tensors = json::array();
  for (const auto& r : records) {
    tensors.push_back({{"name", r.info.name},
                       {"dtype", r.info.dtype},
                       {"element_size", r.info.element_size},
                       {"shape", r.info.shape},
                       {"replicated", r.info.replicated},
                       {"rows", {r.where.row_begin, r.where.row_end}},
                       {"offset", r.where.offset},
                       {"bytes", r.where.size},
                       {"crc32c", r.where.crc32c}});
  }
  json j{{"format", kFormat},        {"version", kVersion},      {"rank", rank},
         {"world_size", world_size}, {"data", shard_data(rank)}, {"tensors", tensors}};
  return j.dump(1) + "\n";
}

std::vector<ShardRecord> decode_shard_meta(std::string_view text, int rank,
                                           const std::string& file) {
  const json j = parse(text, file);
  try {
    if (j.at("rank").get<int>() != rank) {
      throw Error(file + ": holds rank " + j.at("rank").dump() + ", expected " +
                  std::to_string(rank));
    }
    std::vector<ShardRecord> out;
    for (const auto& t : j.at("tensors")) {
      ShardRecord r;
      r.info.name = t.at("name").get<std::string>();
      r.info.dtype = t.at("dtype").get<std::string>();
      r.info.element_size = t.at("element_size").get<std::size_t>();
      r.info.shape = t.at("shape").get<std::vector<std::int64_t>>();
      r.info.replicated = t.at("replicated").get<bool>();
      r.where.file = j.at("data").get<std::string>();
      r.where.row_begin = t.at("rows").at(0).get<std::int64_t>();
      r.where.row_end = t.at("rows").at(1).get<std::int64_t>();
      r.where.offset = t.at("offset").get<std::uint64_t>();
      r.where.size = t.at("bytes").get<std::uint64_t>();
      r.where.crc32c = t.at("crc32c").get<std::uint32_t>();
      const auto rows = r.where.row_end - r.where.row_begin;
      if (r.where.row_begin < 0 || rows < 0 || r.where.row_end > r.info.rows() ||
          r.where.size != static_cast<std::uint64_t>(rows) * r.info.row_bytes()) {
        throw Error(file + ": tensor '" + r.info.name + "' has an inconsistent record");
      }
      out.push_back(std::move(r));
    }
    return out;
  } catch (const json::exception& e) {
    throw Error(file + ": unreadable checkpoint metadata: " + e.what());
  }
}

std::string encode_manifest(std::int64_t step, int world_size, std::string_view extra_json) {
  json extra;
  try {
    extra = json::parse(extra_json);
  } catch (const json::exception& e) {
    throw ConfigError("checkpoint extra is not JSON: " + std::string(e.what()));
  }
  json j{{"format", kFormat},
         {"version", kVersion},
         {"step", step},
         {"world_size", world_size},
         {"extra", extra}};
  return j.dump(1) + "\n";
}

Manifest decode_manifest(std::string_view text, const std::string& file) {
  const json j = parse(text, file);
  try {
    Manifest m{j.at("step").get<std::int64_t>(), j.at("world_size").get<int>(),
               j.at("extra").dump()};
    if (m.world_size < 1) throw Error(file + ": world_size " + std::to_string(m.world_size));
    return m;
  } catch (const json::exception& e) {
    throw Error(file + ": unreadable checkpoint metadata: " + e.what());
  }
}

}  // namespace elasticrun::ckpt::layout
