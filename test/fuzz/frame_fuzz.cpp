// libFuzzer target for the TCPStore request parser (src/store/frame.cpp),
// driven the way the server drives it, with every decoded request applied to
// a store::Handler.
//
// Input: byte 0 picks where the stream is split (below); bytes 1.. are what
// one client connection sends, e.g. 00 CE F7 85 3C (VALIDATE + magic) and
// then modern requests, or legacy (PyTorch < 2.2) requests straight away.
//
// The stream is parsed twice:
//  - whole: parse_request in a loop over the entire buffer, as the server
//    does with one read holding many pipelined requests. On complete the
//    request goes to the Handler and parsing continues with the rest; on
//    incomplete or invalid it stops. A handler error closes the connection in
//    the server, so the handler sees no more requests (parsing goes on, for
//    the comparison below).
//  - split: the same bytes arriving in two reads, byte 0 choosing the split
//    point (0 = all in the second read, 255 = all in the first); like the
//    server, the unparsed tail of the first read is kept and the second read
//    appended to it.
// Both must yield the same requests, the same final state (bytes left over,
// closed or not, and why) and the same dialect; any difference aborts.
//
// Each complete request is also checked against an independent encoder:
// re-encoding its fields in the order docs/protocol.md gives must reproduce
// exactly the bytes it was decoded from, and it must respect the Limits. Of
// the Handler: reply sizes that follow from the request alone, no client woken
// twice or woken yet still waiting, and no wait left once every client has
// disconnected.
//
// Every request passes the gate of a store without a secret first (AUTH
// requests are answered or refused there), as the server does; a second
// gate, of a store with a secret, sees the same requests and must never
// let one through: the fuzzer cannot forge the proof of a nonce it never
// saw.
//
// Multiplexing (a harness device, not protocol): a PING switches the client
// id the following requests are handled for to 1 + nonce % 4, so that one
// input can build waits of several clients and wake them.
//
// Limits are small so the fuzzer reaches every one of them within
// scripts/fuzz.sh's -max_len=4096: a value (and an APPEND's result) over 1 KiB,
// and a request over 2 KiB (e.g. two values of 1000 bytes), are refused.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "store/auth.hpp"
#include "store/frame.hpp"
#include "store/handler.hpp"
#include "store/protocol.hpp"

namespace {

using namespace elasticrun::store;

const Limits kLimits = [] {
  Limits l;
  l.max_key_size = 256;
  l.max_value_size = 1024;
  l.max_keys_per_request = 64;
  l.max_request_size = 2048;
  return l;
}();

constexpr ClientId kClients = 4;

// Aborts with a message: assert() is compiled out in the fuzz preset's
// RelWithDebInfo build.
#define FUZZ_CHECK(cond, ...)                                                                    \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "frame_fuzz: check failed: %s (%s:%d): ", #cond, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                                         \
      std::fprintf(stderr, "\n");                                                                \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

bool auth_byte(uint8_t raw) {
  return raw == static_cast<uint8_t>(QueryType::kAuthHello) ||
         raw == static_cast<uint8_t>(QueryType::kAuthProof);
}

bool same(const Request& a, const Request& b) {
  return a.type == b.type && a.keys == b.keys && a.values == b.values && a.number == b.number &&
         a.word == b.word;
}

// The modern type a legacy (PyTorch <= 2.0) type byte means, per the spec's
// 2.0 column; false for WATCH_KEY and unknown bytes.
bool legacy_type(uint8_t raw, QueryType& out) {
  switch (raw) {
    case 0:
      out = QueryType::kSet;
      return true;
    case 1:
      out = QueryType::kCompareSet;
      return true;
    case 2:
      out = QueryType::kGet;
      return true;
    case 3:
      out = QueryType::kAdd;
      return true;
    case 4:
      out = QueryType::kCheck;
      return true;
    case 5:
      out = QueryType::kWait;
      return true;
    case 6:
      out = QueryType::kGetNumKeys;
      return true;
    case 8:
      out = QueryType::kDeleteKey;
      return true;
    case 9:
      out = QueryType::kAppend;
      return true;
    case 10:
      out = QueryType::kMultiGet;
      return true;
    case 11:
      out = QueryType::kMultiSet;
      return true;
    case 12:
      out = QueryType::kCancelWait;
      return true;
    default:
      return false;
  }
}

// The fields of req after the type byte, encoded independently of frame.cpp's
// decoder. Also checks that req has the shape its type calls for (the
// Handler indexes keys[0] and values[1] unchecked).
std::string encode_fields(const Request& req) {
  std::string s;
  RequestWriter w(s);
  auto shape = [&](size_t keys, size_t values) {
    FUZZ_CHECK(req.keys.size() == keys && req.values.size() == values,
               "%s with %zu keys and %zu values", std::string(query_type_name(req.type)).c_str(),
               req.keys.size(), req.values.size());
  };
  switch (req.type) {
    case QueryType::kValidate:
    case QueryType::kPing:
      shape(0, 0);
      w.u32(req.word);
      break;
    case QueryType::kSet:
    case QueryType::kAppend:
    case QueryType::kQueuePush:
      shape(1, 1);
      w.bytes(req.keys[0]).bytes(req.values[0]);
      break;
    case QueryType::kCompareSet:
      shape(1, 2);
      w.bytes(req.keys[0]).bytes(req.values[0]).bytes(req.values[1]);
      break;
    case QueryType::kGet:
    case QueryType::kDeleteKey:
    case QueryType::kQueuePop:
    case QueryType::kQueueLen:
      shape(1, 0);
      w.bytes(req.keys[0]);
      break;
    case QueryType::kAdd:
    case QueryType::kBarrier:
      shape(1, 0);
      w.bytes(req.keys[0]).i64(req.number);
      break;
    case QueryType::kCheck:
    case QueryType::kWait:
    case QueryType::kMultiGet:
      shape(req.keys.size(), 0);
      w.u64(req.keys.size());
      for (const auto& k : req.keys) w.bytes(k);
      break;
    case QueryType::kMultiSet:
      shape(req.keys.size(), req.keys.size());
      w.u64(req.keys.size());
      for (size_t i = 0; i < req.keys.size(); ++i) w.bytes(req.keys[i]).bytes(req.values[i]);
      break;
    case QueryType::kGetNumKeys:
    case QueryType::kCancelWait:
    case QueryType::kListKeys:
      shape(0, 0);
      break;
    case QueryType::kAuthHello:
    case QueryType::kAuthProof:
      shape(0, 1);
      FUZZ_CHECK(req.values[0].size() <= kMaxAuthField, "handshake field of %zu bytes",
                 req.values[0].size());
      w.bytes(req.values[0]);
      break;
    case QueryType::kReplicate:
      shape(0, 1);
      FUZZ_CHECK(req.values[0].size() <= kMaxEndpoint, "endpoint of %zu bytes",
                 req.values[0].size());
      w.bytes(req.values[0]);
      break;
    default:
      FUZZ_CHECK(false, "decoded query type %u", static_cast<unsigned>(req.type));
  }
  return s;
}

// What must hold of one parse_request call on data (the unparsed rest of a
// connection's buffer), given the dialect before and after it.
void check_result(std::string_view data, Dialect before, Dialect after, const ParseResult& r,
                  const Request& req) {
  FUZZ_CHECK(before == Dialect::kUnknown || after == before, "dialect changed mid-connection");
  switch (r.status) {
    case ParseStatus::kComplete: {
      FUZZ_CHECK(r.consumed >= 1 && r.consumed <= data.size(), "consumed %zu of %zu", r.consumed,
                 data.size());
      FUZZ_CHECK(after != Dialect::kUnknown, "complete request, dialect still unknown");
      FUZZ_CHECK(r.error.empty(), "complete with error '%s'", r.error.c_str());
      // The type byte: as sent (modern) or translated (legacy).
      const auto raw = static_cast<uint8_t>(data[0]);
      if (after == Dialect::kModern || auth_byte(raw)) {
        FUZZ_CHECK(static_cast<uint8_t>(req.type) == raw, "type byte %u decoded as %u", raw,
                   static_cast<unsigned>(req.type));
      } else {
        QueryType t{};
        FUZZ_CHECK(legacy_type(raw, t) && t == req.type, "legacy type byte %u decoded as %u", raw,
                   static_cast<unsigned>(req.type));
      }
      if (before == Dialect::kUnknown) {
        bool modern = after == Dialect::kModern;
        FUZZ_CHECK(modern == ((req.type == QueryType::kValidate && req.word == kValidationMagic &&
                               raw == 0) ||
                              auth_byte(raw)),
                   "first request decided the wrong dialect");
      }
      // The fields: re-encoded, exactly the bytes consumed.
      std::string fields = encode_fields(req);
      FUZZ_CHECK(fields == data.substr(1, r.consumed - 1),
                 "%s: re-encoding gives %zu bytes, the parser consumed %zu",
                 std::string(query_type_name(req.type)).c_str(), fields.size() + 1, r.consumed);
      // Limits.
      FUZZ_CHECK(req.keys.size() <= kLimits.max_keys_per_request, "%zu keys", req.keys.size());
      size_t total = 0;
      for (const auto& k : req.keys) {
        FUZZ_CHECK(k.size() <= kLimits.max_key_size, "key of %zu bytes", k.size());
        total += k.size();
      }
      for (const auto& v : req.values) {
        FUZZ_CHECK(v.size() <= kLimits.max_value_size, "value of %zu bytes", v.size());
        total += v.size();
      }
      FUZZ_CHECK(total <= kLimits.max_request_size, "request of %zu bytes", total);
      break;
    }
    case ParseStatus::kIncomplete:
      FUZZ_CHECK(r.error.empty(), "incomplete with error '%s'", r.error.c_str());
      // needed, when known, is more than what is here (else it would not be incomplete).
      FUZZ_CHECK(r.needed == 0 || r.needed > data.size(), "incomplete: needed %zu of %zu bytes",
                 r.needed, data.size());
      break;
    case ParseStatus::kInvalid:
      FUZZ_CHECK(!r.error.empty(), "invalid without a reason");
      FUZZ_CHECK(after != Dialect::kUnknown, "invalid request, dialect still unknown");
      break;
  }
}

// One connection's parse: what it decoded and where it stopped.
struct Connection {
  Dialect dialect = Dialect::kUnknown;
  std::vector<Request> requests;
  std::vector<size_t> starts;  // stream offset of each request
  std::string partial;         // bytes received but not yet parsed
  size_t offset = 0;           // stream offset of partial's first byte
  bool closed = false;
  size_t closed_at = 0;  // stream offset of the invalid request, when closed
  std::string error;
  // The last incomplete parse, for the needed-bytes check: at stream offset
  // incomplete_at, needed (0 if unknown).
  size_t incomplete_at = SIZE_MAX;
  size_t needed = 0;

  // The server's process(): parses every complete request in data (the
  // buffered bytes); returns how many bytes were used. handle, if set, is
  // called for each complete request in order.
  template <typename Handle>
  size_t process(std::string_view data, Handle&& handle) {
    size_t used = 0;
    while (!closed && used < data.size()) {
      Request req;
      std::string_view rest = data.substr(used);
      Dialect before = dialect;
      ParseResult r = parse_request(rest, dialect, kLimits, req);
      check_result(rest, before, dialect, r, req);
      if (r.status == ParseStatus::kIncomplete) {
        incomplete_at = offset + used;
        needed = r.needed;
        break;
      }
      if (r.status == ParseStatus::kInvalid) {
        closed = true;
        closed_at = offset + used;
        error = r.error;
        break;
      }
      starts.push_back(offset + used);
      used += r.consumed;
      requests.push_back(req);
      handle(req);
    }
    return used;
  }

  // The server's on_read(): one read of fresh bytes.
  template <typename Handle>
  void read(std::string_view fresh, Handle&& handle) {
    if (closed || fresh.empty()) return;
    partial.append(fresh);
    size_t used = process(partial, handle);
    partial.erase(0, used);
    offset += used;
  }
};

// Applies requests to a Handler as the server does, with the PING device of
// the header comment. After a handler error the connection is gone: later
// requests are ignored.
class Server {
 public:
  Server() : handler_(kLimits) {}

  void operator()(const Request& decoded) {
    if (dead_) return;
    std::string why;
    reply_.clear();
    FUZZ_CHECK(gated_.admit(decoded, reply_, why) != AuthGate::Verdict::kPass,
               "%s passed the gate of a store with a secret",
               std::string(query_type_name(decoded.type)).c_str());
    reply_.clear();
    switch (open_.admit(decoded, reply_, why)) {
      case AuthGate::Verdict::kAnswered:
        FUZZ_CHECK(decoded.type == QueryType::kAuthHello && reply_ == std::string(8, '\0'),
                   "the open gate answered %s with %zu bytes",
                   std::string(query_type_name(decoded.type)).c_str(), reply_.size());
        return;
      case AuthGate::Verdict::kRefused:
        FUZZ_CHECK(!why.empty(), "refused without a reason");
        dead_ = true;
        return;
      case AuthGate::Verdict::kPass:
        FUZZ_CHECK(decoded.type != QueryType::kAuthHello && decoded.type != QueryType::kAuthProof,
                   "the open gate passed %s", std::string(query_type_name(decoded.type)).c_str());
        break;
    }
    if (decoded.type == QueryType::kReplicate) {  // the server's: a standby's stream follows
      dead_ = true;
      return;
    }
    Request req = decoded;  // handle() moves values out
    if (req.type == QueryType::kPing) client_ = 1 + req.word % kClients;
    reply_.clear();
    woken_.clear();
    HandleResult h = handler_.handle(client_, req, reply_, woken_);
    if (!h.ok) {
      FUZZ_CHECK(!h.error.empty(), "handler failed without a reason");
      dead_ = true;
      return;
    }
    check_reply(decoded);
    for (size_t i = 0; i < woken_.size(); ++i) {
      ClientId id = woken_[i];
      FUZZ_CHECK(id >= 1 && id <= kClients, "woke unknown client %llu",
                 static_cast<unsigned long long>(id));
      // A second STOP_WAITING for one wait would desynchronise that client.
      for (size_t j = 0; j < i; ++j) {
        FUZZ_CHECK(woken_[j] != id, "%s woke client %llu twice",
                   std::string(query_type_name(decoded.type)).c_str(),
                   static_cast<unsigned long long>(id));
      }
      FUZZ_CHECK(!handler_.state().waiting(id), "client %llu woken but still waiting",
                 static_cast<unsigned long long>(id));
    }
  }

  // Every client disconnects: no wait may survive.
  void finish() {
    for (ClientId id = 1; id <= kClients; ++id) handler_.disconnect(id);
    FUZZ_CHECK(handler_.state().waiter_count() == 0, "%zu waits left after all disconnected",
               handler_.state().waiter_count());
  }

 private:
  // Reply sizes that follow from the request alone.
  void check_reply(const Request& req) {
    size_t expect = SIZE_MAX;
    switch (req.type) {
      case QueryType::kValidate:
      case QueryType::kSet:
      case QueryType::kAppend:
      case QueryType::kMultiSet:
      case QueryType::kQueuePush:
        expect = 0;
        break;
      case QueryType::kPing:
        expect = 4;
        break;
      case QueryType::kAdd:
      case QueryType::kGetNumKeys:
      case QueryType::kDeleteKey:
      case QueryType::kQueueLen:
        expect = 8;
        break;
      case QueryType::kCheck:
      case QueryType::kCancelWait:
        expect = 1;
        break;
      case QueryType::kWait:
      case QueryType::kBarrier:
        FUZZ_CHECK(reply_.size() <= 1, "%s reply of %zu bytes",
                   std::string(query_type_name(req.type)).c_str(), reply_.size());
        break;
      default:
        break;
    }
    if (expect != SIZE_MAX) {
      FUZZ_CHECK(reply_.size() == expect, "%s reply of %zu bytes, expected %zu",
                 std::string(query_type_name(req.type)).c_str(), reply_.size(), expect);
    }
  }

  const std::string secret_ = "the fuzzer never sees this secret";
  AuthGate open_{nullptr};
  AuthGate gated_{&secret_};
  Handler handler_;
  ClientId client_ = 1;
  bool dead_ = false;
  std::string reply_;
  Wakeups woken_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = static_cast<size_t>(data[0]) * stream.size() / 255;

  // Whole: one read, every request handled.
  Server server;
  Connection whole;
  whole.read(stream, server);
  server.finish();

  // Split: two reads.
  Connection two;
  auto ignore = [](const Request&) {};
  two.read(stream.substr(0, split), ignore);
  const size_t first_incomplete_at = two.incomplete_at;
  const size_t first_needed = two.needed;
  two.read(stream.substr(split), ignore);

  FUZZ_CHECK(whole.requests.size() == two.requests.size(),
             "split at %zu of %zu: %zu requests whole, %zu split", split, stream.size(),
             whole.requests.size(), two.requests.size());
  for (size_t i = 0; i < whole.requests.size(); ++i) {
    FUZZ_CHECK(whole.starts[i] == two.starts[i] && same(whole.requests[i], two.requests[i]),
               "split at %zu: request %zu (at %zu, %s) differs", split, i, whole.starts[i],
               std::string(query_type_name(whole.requests[i].type)).c_str());
  }
  FUZZ_CHECK(whole.closed == two.closed && whole.error == two.error,
             "split at %zu: whole %s '%s', split %s '%s'", split, whole.closed ? "closed" : "open",
             whole.error.c_str(), two.closed ? "closed" : "open", two.error.c_str());
  if (whole.closed) {
    FUZZ_CHECK(whole.closed_at == two.closed_at, "split at %zu: closed at %zu whole, %zu split",
               split, whole.closed_at, two.closed_at);
  } else {
    // Open: the same bytes wait for more (a closed connection's buffer is moot).
    FUZZ_CHECK(whole.offset == two.offset && whole.partial == two.partial,
               "split at %zu: %zu bytes left whole, %zu split", split, whole.partial.size(),
               two.partial.size());
  }
  FUZZ_CHECK(whole.dialect == two.dialect, "split at %zu: dialects differ", split);

  // needed after the first read is a lower bound: the request that was
  // incomplete there, if complete in the whole stream, is at least that long;
  // if still incomplete, needs at least as much.
  if (first_needed != 0 && first_incomplete_at != SIZE_MAX) {
    for (size_t i = 0; i < whole.starts.size(); ++i) {
      if (whole.starts[i] != first_incomplete_at) continue;
      size_t end = i + 1 < whole.starts.size() ? whole.starts[i + 1] : whole.offset;
      FUZZ_CHECK(end - whole.starts[i] >= first_needed,
                 "request at %zu said it needed %zu bytes, is %zu", first_incomplete_at,
                 first_needed, end - whole.starts[i]);
    }
    if (!whole.closed && whole.incomplete_at == first_incomplete_at && whole.needed != 0) {
      FUZZ_CHECK(whole.needed >= first_needed, "needed shrank from %zu to %zu with more bytes",
                 first_needed, whole.needed);
    }
  }
  return 0;
}
