#include "store/frame.hpp"

#include <bit>
#include <cstring>

namespace elasticrun::store {

// TCPStore sends integers in host byte order; every platform PyTorch ships
// for is little-endian, and so is our wire format (docs/protocol.md).
static_assert(std::endian::native == std::endian::little,
              "the TCPStore wire format is little-endian; add byte swaps for this platform");

std::string_view query_type_name(QueryType t) {
  static constexpr std::string_view kNames[] = {
      "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
      "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
      "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS", "BARRIER"};
  if (t == QueryType::kAuthHello) return "AUTH_HELLO";
  if (t == QueryType::kAuthProof) return "AUTH_PROOF";
  if (t == QueryType::kReplicate) return "REPLICATE";
  auto i = static_cast<size_t>(t);
  return i < std::size(kNames) ? kNames[i] : "UNKNOWN";
}

namespace {

// Reads fields from a buffer that may end mid-request. The first shortage
// sets incomplete; the first violation sets error. Either stops all reads.
class Cursor {
 public:
  // With extract false the cursor only validates and measures: nothing is
  // copied until the whole request has arrived.
  Cursor(std::string_view data, const Limits& limits, bool extract)
      : data_(data), limits_(limits), extract_(extract) {}

  bool ok() const { return !incomplete_ && error_.empty(); }
  bool incomplete() const { return incomplete_; }
  const std::string& error() const { return error_; }
  size_t pos() const { return pos_; }
  // When incomplete: bytes (from the cursor's start) needed before trying again.
  size_t needed() const { return needed_; }

  template <typename T>
  T fixed() {
    T v{};
    if (!ok()) return v;
    if (data_.size() - pos_ < sizeof(T)) {
      short_of(sizeof(T));
      return v;
    }
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A u64-length-prefixed string of at most max bytes; what names the field
  // in the error ("key", "value").
  std::string string(size_t max, const char* what) {
    uint64_t len = fixed<uint64_t>();
    if (!ok()) return {};
    if (len > max) {
      fail(std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
           std::to_string(max));
      return {};
    }
    total_ += len;
    if (total_ > limits_.max_request_size) {
      fail("request of more than " + std::to_string(limits_.max_request_size) + " bytes");
      return {};
    }
    if (data_.size() - pos_ < len) {
      short_of(len);
      return {};
    }
    std::string s = extract_ ? std::string(data_.substr(pos_, len)) : std::string();
    pos_ += len;
    return s;
  }

  std::string key() { return string(limits_.max_key_size, "key"); }
  std::string value() { return string(limits_.max_value_size, "value"); }

  uint64_t count() {
    uint64_t n = fixed<uint64_t>();
    if (ok() && n > limits_.max_keys_per_request) {
      fail("request names " + std::to_string(n) + " keys, more than the limit of " +
           std::to_string(limits_.max_keys_per_request));
    }
    return n;
  }

  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

 private:
  void short_of(uint64_t len) {
    incomplete_ = true;
    needed_ = pos_ + len;
  }

  std::string_view data_;
  const Limits& limits_;
  bool extract_;
  size_t pos_ = 0;
  size_t needed_ = 0;
  uint64_t total_ = 0;
  bool incomplete_ = false;
  std::string error_;
};

// Maps a type byte of PyTorch <= 2.0 to the modern type; false if unsupported.
bool translate_legacy(uint8_t raw, QueryType& out, std::string& error) {
  static constexpr QueryType kMap[] = {QueryType::kSet,        QueryType::kCompareSet,
                                       QueryType::kGet,        QueryType::kAdd,
                                       QueryType::kCheck,      QueryType::kWait,
                                       QueryType::kGetNumKeys, QueryType::kValidate /* WATCH_KEY */,
                                       QueryType::kDeleteKey,  QueryType::kAppend,
                                       QueryType::kMultiGet,   QueryType::kMultiSet,
                                       QueryType::kCancelWait};
  if (raw == static_cast<uint8_t>(LegacyQueryType::kWatchKey)) {
    error = "WATCH_KEY (torch.distributed.TCPStore.watch_key of PyTorch <= 2.0) is not supported";
    return false;
  }
  if (raw >= std::size(kMap)) {
    error = "unknown query type " + std::to_string(raw) + " for a PyTorch <= 2.0 client";
    return false;
  }
  out = kMap[raw];
  return true;
}

// Reads the fields of a request of the given type; with a non-extracting
// cursor this only validates lengths and finds the end.
void decode(Cursor& c, QueryType type, size_t available, Request* out) {
  auto key = [&] {
    std::string k = c.key();
    if (out) out->keys.push_back(std::move(k));
  };
  auto value = [&] {
    std::string v = c.value();
    if (out) out->values.push_back(std::move(v));
  };
  switch (type) {
    case QueryType::kValidate:
    case QueryType::kPing:
      if (uint32_t w = c.fixed<uint32_t>(); out) out->word = w;
      break;
    case QueryType::kSet:
    case QueryType::kAppend:
    case QueryType::kQueuePush:
      key();
      value();
      break;
    case QueryType::kCompareSet:
      key();
      value();
      value();
      break;
    case QueryType::kGet:
    case QueryType::kDeleteKey:
    case QueryType::kQueuePop:
    case QueryType::kQueueLen:
      key();
      break;
    case QueryType::kAdd:
    case QueryType::kBarrier:
      key();
      if (int64_t n = c.fixed<int64_t>(); out) out->number = n;
      break;
    case QueryType::kCheck:
    case QueryType::kWait:
    case QueryType::kMultiGet: {
      uint64_t n = c.count();
      // Reserve only what has arrived: n is capped, but a capped n of
      // 128k empty strings is still worth not allocating for a liar.
      if (out) out->keys.reserve(std::min<uint64_t>(n, (available - 1) / 8));
      for (uint64_t i = 0; i < n && c.ok(); ++i) key();
      break;
    }
    case QueryType::kMultiSet: {
      uint64_t n = c.count();
      if (out) {
        out->keys.reserve(std::min<uint64_t>(n, (available - 1) / 16));
        out->values.reserve(out->keys.capacity());
      }
      for (uint64_t i = 0; i < n && c.ok(); ++i) {
        key();
        value();
      }
      break;
    }
    case QueryType::kGetNumKeys:
    case QueryType::kCancelWait:
    case QueryType::kListKeys:
      break;
    case QueryType::kAuthHello:
    case QueryType::kAuthProof:
      if (std::string v = c.string(kMaxAuthField, "handshake field"); out) {
        out->values.push_back(std::move(v));
      }
      break;
    case QueryType::kReplicate:
      if (std::string v = c.string(kMaxEndpoint, "endpoint"); out) {
        out->values.push_back(std::move(v));
      }
      break;
  }
}

bool is_auth(uint8_t raw) {
  return raw == static_cast<uint8_t>(QueryType::kAuthHello) ||
         raw == static_cast<uint8_t>(QueryType::kAuthProof);
}

}  // namespace

ParseResult parse_request(std::string_view data, Dialect& dialect, const Limits& limits,
                          Request& out) {
  ParseResult r;
  if (data.empty()) return r;
  const auto first = static_cast<uint8_t>(data[0]);

  if (dialect == Dialect::kUnknown && is_auth(first)) {
    dialect = Dialect::kModern;  // only elasticrun's client authenticates
  } else if (dialect == Dialect::kUnknown) {
    // A PyTorch >= 2.2 client opens with VALIDATE (type 0) and the magic; an
    // older one with any request, and type 0 is its SET, so look at 5 bytes.
    if (first == 0 && data.size() < 5) return r;
    uint32_t magic = 0;
    if (first == 0) std::memcpy(&magic, data.data() + 1, sizeof(magic));
    dialect = (first == 0 && magic == kValidationMagic) ? Dialect::kModern : Dialect::kLegacy;
  }

  QueryType type{};
  if (is_auth(first)) {
    type = static_cast<QueryType>(first);
  } else if (dialect == Dialect::kLegacy) {
    if (!translate_legacy(first, type, r.error)) {
      r.status = ParseStatus::kInvalid;
      return r;
    }
  } else if (first == static_cast<uint8_t>(QueryType::kReplicate)) {
    type = QueryType::kReplicate;
  } else {
    if (first > kMaxQueryType) {
      r.status = ParseStatus::kInvalid;
      r.error = "unknown query type " + std::to_string(first);
      return r;
    }
    type = static_cast<QueryType>(first);
  }

  Cursor scan(data.substr(1), limits, /*extract=*/false);
  decode(scan, type, data.size(), nullptr);
  if (!scan.error().empty()) {
    r.status = ParseStatus::kInvalid;
    r.error = std::string(query_type_name(type)) + ": " + scan.error();
    return r;
  }
  if (scan.incomplete()) {
    r.needed = 1 + scan.needed();
    return r;
  }
  out = Request{};
  out.type = type;
  Cursor c(data.substr(1), limits, /*extract=*/true);
  decode(c, type, data.size(), &out);
  r.status = ParseStatus::kComplete;
  r.consumed = 1 + c.pos();
  return r;
}
void ReplyWriter::u32(uint32_t v) {
  out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void ReplyWriter::i64(int64_t v) {
  out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void ReplyWriter::bytes(std::string_view v) {
  uint64_t n = v.size();
  out_.append(reinterpret_cast<const char*>(&n), sizeof(n));
  out_.append(v);
}

RequestWriter& RequestWriter::u32(uint32_t v) {
  out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  return *this;
}
RequestWriter& RequestWriter::u64(uint64_t v) {
  out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  return *this;
}
RequestWriter& RequestWriter::bytes(std::string_view v) {
  u64(v.size());
  out_.append(v);
  return *this;
}

}  // namespace elasticrun::store
