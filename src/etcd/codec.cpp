#include "etcd/codec.hpp"

#include <array>
#include <charconv>

#include "elasticrun/errors.hpp"

namespace elasticrun::etcd {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// A 64-bit field: the gateway writes them as strings, but a number is read
// too; absent is zero.
int64_t int_field(const Json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size()) return v;
  }
  throw StoreError("etcd: field '" + std::string(name) + "' is not an integer: " + it->dump());
}

bool bool_field(const Json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string bytes_field(const Json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw StoreError("etcd: field '" + std::string(name) + "' is not bytes");
  return unbase64(it->get_ref<const std::string&>());
}

std::string string_field(const Json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t revision_of(const Json& reply) {
  const auto h = reply.find("header");
  return h == reply.end() ? 0 : int_field(*h, "revision");
}

KeyValue key_value(const Json& j) {
  KeyValue kv;
  kv.key = bytes_field(j, "key");
  kv.value = bytes_field(j, "value");
  kv.create_revision = int_field(j, "create_revision");
  kv.mod_revision = int_field(j, "mod_revision");
  kv.version = int_field(j, "version");
  kv.lease = int_field(j, "lease");
  return kv;
}

const char* target_name(Compare::Target t) {
  switch (t) {
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kCreate:
      return "CREATE";
    case Compare::Target::kMod:
      return "MOD";
    case Compare::Target::kValue:
      return "VALUE";
  }
  return "VALUE";
}

const char* result_name(Compare::Result r) {
  switch (r) {
    case Compare::Result::kEqual:
      return "EQUAL";
    case Compare::Result::kNotEqual:
      return "NOT_EQUAL";
    case Compare::Result::kGreater:
      return "GREATER";
    case Compare::Result::kLess:
      return "LESS";
  }
  return "EQUAL";
}

Json compare_json(const Compare& c) {
  Json j = {
      {"key", base64(c.key)}, {"target", target_name(c.target)}, {"result", result_name(c.result)}};
  const std::string n = std::to_string(c.number);
  switch (c.target) {
    case Compare::Target::kVersion:
      j["version"] = n;
      break;
    case Compare::Target::kCreate:
      j["create_revision"] = n;
      break;
    case Compare::Target::kMod:
      j["mod_revision"] = n;
      break;
    case Compare::Target::kValue:
      j["value"] = base64(c.value);
      break;
  }
  return j;
}

Json op_json(const Op& op) {
  if (const auto* r = std::get_if<Range>(&op)) return {{"request_range", request(*r)}};
  if (const auto* p = std::get_if<Put>(&op)) return {{"request_put", request(*p)}};
  return {{"request_delete_range", request(std::get<DeleteRange>(op))}};
}

}  // namespace

std::string base64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += kAlphabet[v & 63];
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (left == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += left == 2 ? kAlphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::string unbase64(std::string_view text) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (size_t i = 0; i < kAlphabet.size(); ++i)
      t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  if (text.size() % 4 != 0)
    throw StoreError("etcd: base64 of " + std::to_string(text.size()) + " characters");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char ch = text[i + k];
      if (ch == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int8_t d = kValue[static_cast<uint8_t>(ch)];
      if (d < 0 || pad > 0)
        throw StoreError("etcd: not base64: " + std::string(text.substr(0, 40)));
      v = v << 6 | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16 & 0xff);
    if (pad < 2) out += static_cast<char>(v >> 8 & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  // Every byte 0xff (or no prefix): to the end of the key space.
  return std::string(1, '\0');
}

Json request(const Range& r) {
  Json j = {{"key", base64(r.key)}};
  if (!r.range_end.empty()) j["range_end"] = base64(r.range_end);
  if (r.count_only) j["count_only"] = true;
  if (r.keys_only) j["keys_only"] = true;
  return j;
}

Json request(const Put& p) {
  Json j = {{"key", base64(p.key)}, {"value", base64(p.value)}};
  if (p.lease != 0) j["lease"] = std::to_string(p.lease);
  if (p.prev_kv) j["prev_kv"] = true;
  return j;
}

Json request(const DeleteRange& d) {
  Json j = {{"key", base64(d.key)}};
  if (!d.range_end.empty()) j["range_end"] = base64(d.range_end);
  return j;
}

Json txn_request(const std::vector<Compare>& compare, const std::vector<Op>& success,
                 const std::vector<Op>& failure) {
  Json j = Json::object();
  Json c = Json::array(), s = Json::array(), f = Json::array();
  for (const auto& x : compare) c.push_back(compare_json(x));
  for (const auto& x : success) s.push_back(op_json(x));
  for (const auto& x : failure) f.push_back(op_json(x));
  if (!c.empty()) j["compare"] = std::move(c);
  if (!s.empty()) j["success"] = std::move(s);
  if (!f.empty()) j["failure"] = std::move(f);
  return j;
}

Json watch_request(std::string_view key, int64_t start_revision) {
  return {{"create_request",
           {{"key", base64(key)}, {"start_revision", std::to_string(start_revision)}}}};
}

Json lease_grant_request(int64_t ttl_s) {
  return {{"TTL", std::to_string(ttl_s)}};
}

Json lease_keepalive_request(int64_t id) {
  return {{"ID", std::to_string(id)}};
}

std::optional<ErrorReply> error_of(const Json& reply) {
  if (!reply.is_object()) return ErrorReply{0, "a reply that is not a JSON object"};
  // A stream's error is an object of its own: {"error": {"grpc_code", "message"}}.
  const Json& r = reply.contains("error") && reply["error"].is_object() ? reply["error"] : reply;
  const auto e = r.find("error");
  const auto m = r.find("message");
  if ((e == r.end() || !e->is_string()) && (m == r.end() || !m->is_string())) return std::nullopt;
  ErrorReply out;
  out.code =
      static_cast<int>(r.contains("grpc_code") ? int_field(r, "grpc_code") : int_field(r, "code"));
  out.message = m != r.end() && m->is_string() ? m->get<std::string>() : e->get<std::string>();
  return out;
}

RangeReply parse_range(const Json& reply) {
  RangeReply r;
  r.revision = revision_of(reply);
  if (const auto kvs = reply.find("kvs"); kvs != reply.end() && kvs->is_array()) {
    for (const auto& kv : *kvs) r.kvs.push_back(key_value(kv));
  }
  r.count = int_field(reply, "count");
  return r;
}

PutReply parse_put(const Json& reply) {
  PutReply p;
  p.revision = revision_of(reply);
  if (const auto prev = reply.find("prev_kv"); prev != reply.end() && prev->is_object()) {
    p.prev_kv = key_value(*prev);
  }
  return p;
}

DeleteReply parse_delete(const Json& reply) {
  return {revision_of(reply), int_field(reply, "deleted")};
}

TxnReply parse_txn(const Json& reply) {
  TxnReply t;
  t.revision = revision_of(reply);
  t.succeeded = bool_field(reply, "succeeded");
  if (const auto rs = reply.find("responses"); rs != reply.end() && rs->is_array()) {
    for (const auto& r : *rs) {
      if (const auto x = r.find("response_range"); x != r.end()) {
        t.responses.emplace_back(parse_range(*x));
      } else if (const auto y = r.find("response_put"); y != r.end()) {
        t.responses.emplace_back(parse_put(*y));
      } else if (const auto z = r.find("response_delete_range"); z != r.end()) {
        t.responses.emplace_back(parse_delete(*z));
      } else {
        throw StoreError("etcd: a transaction's response of no known kind: " + r.dump());
      }
    }
  }
  return t;
}

LeaseReply parse_lease(const Json& reply) {
  const Json& r = reply.contains("result") ? reply["result"] : reply;
  return {int_field(r, "ID"), int_field(r, "TTL")};
}

WatchMessage parse_watch(const Json& line) {
  const auto res = line.find("result");
  if (res == line.end() || !res->is_object()) {
    throw StoreError("etcd: a watch message without a result: " + line.dump().substr(0, 200));
  }
  WatchMessage m;
  m.created = bool_field(*res, "created");
  m.canceled = bool_field(*res, "canceled");
  m.compact_revision = int_field(*res, "compact_revision");
  m.cancel_reason = string_field(*res, "cancel_reason");
  if (const auto evs = res->find("events"); evs != res->end() && evs->is_array()) {
    for (const auto& e : *evs) {
      WatchEvent ev;
      ev.deleted = string_field(e, "type") == "DELETE";
      if (const auto kv = e.find("kv"); kv != e.end()) ev.kv = key_value(*kv);
      m.events.push_back(std::move(ev));
    }
  }
  return m;
}

}  // namespace elasticrun::etcd
