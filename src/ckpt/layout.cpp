#include "ckpt/layout.hpp"

#include <charconv>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

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
    // Compared as JSON, not through value<int>: a version of 1e39 would be
    // converted to int first, which is undefined (found by ckpt_meta_fuzz).
    if (!j.contains("version") || j["version"] != json(kVersion)) {
      throw Error(file + ": checkpoint format version " + j.value("version", json()).dump() +
                  ", this build reads version " + std::to_string(kVersion));
    }
    return j;
  } catch (const json::exception& e) {
    throw Error(file + ": unreadable checkpoint metadata: " + e.what());
  }
}

// nlohmann's get<T> converts any number to T, truncating 1.5 and wrapping
// 2^33 into a uint32_t; a metadata field must be an integer that fits.
template <class T>
T integer(const json& v, std::string_view field, const std::string& where) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (std::cmp_less_equal(u, std::numeric_limits<T>::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  }
  throw Error(where + ": " + std::string(field) + " is " + v.dump() + ", not an integer in range");
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

std::vector<ShardRecord> decode_shard_meta(std::string_view text, int rank, int world_size,
                                           const std::string& file) {
  const json j = parse(text, file);
  try {
    const int meta_rank = integer<int>(j.at("rank"), "rank", file);
    const int meta_world = integer<int>(j.at("world_size"), "world_size", file);
    if (meta_rank != rank || meta_world != world_size) {
      throw Error(file + ": written by rank " + std::to_string(meta_rank) + " of " +
                  std::to_string(meta_world) + ", expected rank " + std::to_string(rank) + " of " +
                  std::to_string(world_size));
    }
    // The data file is named by the rank, never by the metadata: a name
    // such as "../x" must not send a reader elsewhere.
    if (j.at("data").get<std::string>() != shard_data(rank)) {
      throw Error(file + ": data file " + j.at("data").dump() + ", expected \"" + shard_data(rank) +
                  "\"");
    }
    std::vector<ShardRecord> out;
    for (const auto& t : j.at("tensors")) {
      ShardRecord r;
      r.info.name = t.at("name").get<std::string>();
      const std::string what = file + ": tensor '" + r.info.name + "'";
      r.info.dtype = t.at("dtype").get<std::string>();
      r.info.element_size = integer<std::size_t>(t.at("element_size"), "element_size", what);
      for (const json& dim : t.at("shape")) {
        r.info.shape.push_back(integer<std::int64_t>(dim, "a dimension", what));
      }
      r.info.replicated = t.at("replicated").get<bool>();
      r.where.file = shard_data(rank);
      const json& rows = t.at("rows");
      if (!rows.is_array() || rows.size() != 2) {
        throw Error(what + ": rows is " + rows.dump() + ", not [begin, end)");
      }
      r.where.row_begin = integer<std::int64_t>(rows[0], "rows[0]", what);
      r.where.row_end = integer<std::int64_t>(rows[1], "rows[1]", what);
      r.where.offset = integer<std::uint64_t>(t.at("offset"), "offset", what);
      r.where.size = integer<std::uint64_t>(t.at("bytes"), "bytes", what);
      r.where.crc32c = integer<std::uint32_t>(t.at("crc32c"), "crc32c", what);
      if (r.info.name.empty() || r.info.dtype.empty() || r.info.element_size == 0) {
        throw Error(what + ": needs a name, a dtype and an element size");
      }
      // Sizes are 64-bit: a shape whose bytes would wrap around to a small
      // number is refused, not believed.
      std::uint64_t tensor_bytes = r.info.element_size;
      std::uint64_t row_bytes = r.info.element_size;
      for (std::size_t d = 0; d < r.info.shape.size(); ++d) {
        const std::int64_t dim = r.info.shape[d];
        const auto udim = static_cast<std::uint64_t>(dim);
        if (dim < 0 || __builtin_mul_overflow(tensor_bytes, udim, &tensor_bytes) ||
            (d > 0 && __builtin_mul_overflow(row_bytes, udim, &row_bytes))) {
          throw Error(what + ": shape " + t.at("shape").dump() + " is negative or too large");
        }
      }
      std::uint64_t end = 0;
      if (r.where.row_begin < 0 || r.where.row_end < r.where.row_begin ||
          r.where.row_end > r.info.rows() ||
          r.where.size !=
              static_cast<std::uint64_t>(r.where.row_end - r.where.row_begin) * row_bytes ||
          __builtin_add_overflow(r.where.offset, r.where.size, &end)) {
        throw Error(what + " has an inconsistent record: rows " + rows.dump() + " of shape " +
                    t.at("shape").dump() + " in " + std::to_string(r.where.size) +
                    " bytes at offset " + std::to_string(r.where.offset));
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
    Manifest m{integer<std::int64_t>(j.at("step"), "step", file),
               integer<int>(j.at("world_size"), "world_size", file), j.at("extra").dump()};
    if (m.world_size < 1) throw Error(file + ": world_size " + std::to_string(m.world_size));
    if (m.step < 0) throw Error(file + ": step " + std::to_string(m.step));
    return m;
  } catch (const json::exception& e) {
    throw Error(file + ": unreadable checkpoint metadata: " + e.what());
  }
}

}  // namespace elasticrun::ckpt::layout
