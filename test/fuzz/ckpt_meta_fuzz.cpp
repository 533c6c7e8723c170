// libFuzzer target for the checkpoint format's metadata decoders
// (src/ckpt/layout): a shard's metadata file and the manifest, which a
// reader trusts to size its reads. The first byte picks the decoder and,
// for shard metadata, the rank and world size the file must claim. A
// decoder must refuse what it cannot use with elasticrun::Error (any other
// exception, or a crash, is a bug), and what it accepts must encode and
// decode again to the same thing.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ckpt/layout.hpp"
#include "elasticrun/errors.hpp"

namespace {

using namespace elasticrun::ckpt;

void shard_meta(std::string_view text, int rank, int world) {
  std::vector<layout::ShardRecord> records;
  try {
    records = layout::decode_shard_meta(text, rank, world, "fuzz.json");
  } catch (const elasticrun::Error&) {
    return;
  }
  const std::string once = layout::encode_shard_meta(rank, world, records);
  const auto again = layout::decode_shard_meta(once, rank, world, "fuzz.json");
  if (layout::encode_shard_meta(rank, world, again) != once) std::abort();
}

void manifest(std::string_view text) {
  layout::Manifest m;
  try {
    m = layout::decode_manifest(text, "checkpoint.json");
  } catch (const elasticrun::Error&) {
    return;
  }
  const auto again =
      layout::decode_manifest(layout::encode_manifest(m.step, m.world_size, m.extra_json), "x");
  if (again.step != m.step || again.world_size != m.world_size ||
      again.extra_json != m.extra_json) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int world = 1 + (data[0] >> 1) % 8;
  const int rank = (data[0] >> 4) % world;
  if (data[0] & 1) {
    manifest(text);
  } else {
    shard_meta(text, rank, world);
  }
  return 0;
}
