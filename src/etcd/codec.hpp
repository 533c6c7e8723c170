// etcd's v3 API as its JSON gateway speaks it: every request body this
// project sends to etcd is made here, and every reply read here, nowhere
// else (docs/protocol.md, "etcd").
//
// The gateway (etcd >= 3.4, paths /v3/...) maps the gRPC messages of
// etcdserverpb to JSON: keys and values are base64, 64-bit integers are
// decimal strings, enum values are their names, and a field at its zero
// value is left out of a reply (no `succeeded` means false, no `kvs` means
// none). Replies name fields as the .proto does (`create_revision`);
// requests are read either way, and are written the .proto's way too.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace elasticrun::etcd {

using Json = nlohmann::json;

// Standard base64 with padding, as protobuf's JSON mapping writes bytes.
std::string base64(std::string_view bytes);
// Throws StoreError on text that is not base64.
std::string unbase64(std::string_view text);

// The end of the key range that holds every key starting with `prefix`
// (etcd's range_end for a prefix: the prefix with its last byte below 0xff
// incremented, and what follows it dropped).
std::string prefix_end(std::string_view prefix);

// One key as etcd keeps it. `version` counts the key's modifications since
// it was created (1 after the creating put); a deletion resets it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

// Requests, as plain calls or as the operations of a transaction.
struct Range {
  std::string key;
  std::string range_end = {};  // empty: the key alone
  bool count_only = false;
  bool keys_only = false;
};
struct Put {
  std::string key;
  std::string value = {};
  int64_t lease = 0;  // 0: none
  bool prev_kv = false;
};
struct DeleteRange {
  std::string key;
  std::string range_end = {};
};
using Op = std::variant<Range, Put, DeleteRange>;

// A transaction's condition on one key. A key that does not exist has
// create_revision, mod_revision and version 0, and no value compares equal.
struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  Target target = Target::kValue;
  Result result = Result::kEqual;
  std::string key;
  int64_t number = 0;      // the revision or version, for every target but kValue
  std::string value = {};  // for kValue
};

Json request(const Range& r);
Json request(const Put& p);
Json request(const DeleteRange& d);
Json txn_request(const std::vector<Compare>& compare, const std::vector<Op>& success,
                 const std::vector<Op>& failure);
// The create_request of a watch on one key from `start_revision`.
Json watch_request(std::string_view key, int64_t start_revision);
Json lease_grant_request(int64_t ttl_s);
Json lease_keepalive_request(int64_t id);

// Replies. `revision` is the store's revision when the request was served.
struct RangeReply {
  int64_t revision = 0;
  std::vector<KeyValue> kvs;
  int64_t count = 0;
};
struct PutReply {
  int64_t revision = 0;
  std::optional<KeyValue> prev_kv;
};
struct DeleteReply {
  int64_t revision = 0;
  int64_t deleted = 0;
};
struct TxnReply {
  int64_t revision = 0;
  bool succeeded = false;
  // One per operation of the branch that ran, in order.
  std::vector<std::variant<RangeReply, PutReply, DeleteReply>> responses;
};
struct LeaseReply {
  int64_t id = 0;
  int64_t ttl_s = 0;  // 0 from a keepalive: the lease has expired
};

// An event of a watch: the key's state after a put, or its deletion.
struct WatchEvent {
  bool deleted = false;
  KeyValue kv;
};
// One message of a watch's stream (one JSON object a line, each wrapped in
// {"result": ...}).
struct WatchMessage {
  bool created = false;
  bool canceled = false;
  // Set when the watch's start revision was compacted away: read again.
  int64_t compact_revision = 0;
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};

// An error etcd answered instead of a reply: {"error", "code", "message"}
// (the gRPC status code and etcd's message); nullopt when `reply` is none.
struct ErrorReply {
  int code = 0;
  std::string message;
};
std::optional<ErrorReply> error_of(const Json& reply);

// Each throws StoreError naming what is missing when the reply is not of
// that kind.
RangeReply parse_range(const Json& reply);
PutReply parse_put(const Json& reply);
DeleteReply parse_delete(const Json& reply);
TxnReply parse_txn(const Json& reply);
LeaseReply parse_lease(const Json& reply);
WatchMessage parse_watch(const Json& line);

}  // namespace elasticrun::etcd
