#include "store/replica.hpp"

#include <cstring>

namespace elasticrun::store {
namespace {

void put_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), 8);
}

void put_bytes(std::string& out, std::string_view v) {
  put_u64(out, v.size());
  out.append(v);
}

// Reads fields in order; the first shortage or breach stops it.
struct Reader {
  explicit Reader(std::string_view d) : data(d) {}
  std::string_view data;
  size_t at = 0;
  bool short_ = false;
  std::string error;

  bool take(void* dst, size_t n) {
    if (short_ || !error.empty()) return false;
    if (data.size() - at < n) {
      short_ = true;
      return false;
    }
    std::memcpy(dst, data.data() + at, n);
    at += n;
    return true;
  }
  std::string bytes(size_t max, const char* what) {
    uint64_t n = 0;
    if (!take(&n, sizeof(n))) return {};
    if (n > max) {
      error = std::string("a standby record's ") + what + " of " + std::to_string(n) +
              " bytes is over the limit of " + std::to_string(max);
      return {};
    }
    if (data.size() - at < n) {
      short_ = true;
      return {};
    }
    std::string v(data.substr(at, n));
    at += n;
    return v;
  }
};

}  // namespace

void write_change(std::string& out, uint64_t seq, const Change& change) {
  out.push_back(static_cast<char>(ReplicaRecord::Tag::kChange));
  put_u64(out, seq);
  out.push_back(static_cast<char>(change.kind));
  put_bytes(out, change.key);
  put_bytes(out, change.value);
}

void write_synced(std::string& out, uint64_t seq, uint64_t store_id) {
  out.push_back(static_cast<char>(ReplicaRecord::Tag::kSynced));
  put_u64(out, seq);
  put_u64(out, store_id);
}

void write_ack(std::string& out, uint64_t seq) {
  put_u64(out, seq);
}

ParseResult parse_replica_record(std::string_view data, const Limits& limits, ReplicaRecord& out) {
  ParseResult r;
  Reader in(data);
  uint8_t tag = 0;
  if (!in.take(&tag, 1)) return r;
  if (tag != static_cast<uint8_t>(ReplicaRecord::Tag::kChange) &&
      tag != static_cast<uint8_t>(ReplicaRecord::Tag::kSynced)) {
    r.status = ParseStatus::kInvalid;
    r.error = "a standby record of unknown tag " + std::to_string(tag);
    return r;
  }
  out.tag = static_cast<ReplicaRecord::Tag>(tag);
  in.take(&out.seq, sizeof(out.seq));
  if (out.tag == ReplicaRecord::Tag::kChange) {
    uint8_t kind = 0;
    if (in.take(&kind, 1) && (kind < 1 || kind > 5)) {
      r.status = ParseStatus::kInvalid;
      r.error = "a standby record of unknown change kind " + std::to_string(kind);
      return r;
    }
    out.change.kind = static_cast<Change::Kind>(kind);
    out.change.key = in.bytes(limits.max_key_size, "key");
    out.change.value = in.bytes(limits.max_request_size, "value");  // APPENDs grow values
  } else {
    in.take(&out.store_id, sizeof(out.store_id));
  }
  if (!in.error.empty()) {
    r.status = ParseStatus::kInvalid;
    r.error = std::move(in.error);
  } else if (!in.short_) {
    r.status = ParseStatus::kComplete;
    r.consumed = in.at;
  }
  return r;
}

}  // namespace elasticrun::store
