// Request decoding and reply encoding of the TCPStore wire format.
#include "store/frame.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

using namespace elasticrun::store;
using Catch::Matchers::Contains;

namespace {

std::string validate_frame(uint32_t magic = kValidationMagic) {
  std::string s;
  RequestWriter(s).type(QueryType::kValidate).u32(magic);
  return s;
}

// A request with a raw type byte: legacy numbering, or types nobody defines.
RequestWriter raw(std::string& s, uint8_t type) {
  s.push_back(static_cast<char>(type));
  return RequestWriter(s);
}

std::string hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

void require_same(const Request& got, const Request& want) {
  CHECK(got.type == want.type);
  CHECK(got.keys == want.keys);
  CHECK(got.values == want.values);
  CHECK(got.number == want.number);
  CHECK(got.word == want.word);
}

struct Case {
  std::string wire;
  Request want;
};

Request req(QueryType t, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
            int64_t number = 0, uint32_t word = 0) {
  Request r;
  r.type = t;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  r.word = word;
  return r;
}

// One request of every modern type, encoded as a PyTorch >= 2.2 client does.
std::vector<Case> modern_cases() {
  std::vector<Case> cases;
  auto add = [&](Request want, auto encode) {
    std::string wire;
    encode(RequestWriter(wire).type(want.type));
    cases.push_back({std::move(wire), std::move(want)});
  };
  const std::string binary("k\0\xff", 3);
  add(req(QueryType::kValidate, {}, {}, 0, kValidationMagic),
      [](RequestWriter& w) { w.u32(kValidationMagic); });
  add(req(QueryType::kSet, {binary}, {"value"}),
      [&](RequestWriter& w) { w.bytes(binary).bytes("value"); });
  add(req(QueryType::kCompareSet, {"k"}, {"old", ""}),
      [](RequestWriter& w) { w.bytes("k").bytes("old").bytes(""); });
  add(req(QueryType::kGet, {"k"}), [](RequestWriter& w) { w.bytes("k"); });
  add(req(QueryType::kAdd, {"n"}, {}, -42), [](RequestWriter& w) { w.bytes("n").i64(-42); });
  add(req(QueryType::kCheck, {"a", "b"}), [](RequestWriter& w) { w.u64(2).bytes("a").bytes("b"); });
  add(req(QueryType::kWait, {"a", ""}), [](RequestWriter& w) { w.u64(2).bytes("a").bytes(""); });
  add(req(QueryType::kGetNumKeys), [](RequestWriter&) {});
  add(req(QueryType::kDeleteKey, {"k"}), [](RequestWriter& w) { w.bytes("k"); });
  add(req(QueryType::kAppend, {"k"}, {"tail"}),
      [](RequestWriter& w) { w.bytes("k").bytes("tail"); });
  add(req(QueryType::kMultiGet, {"x", "y", "z"}),
      [](RequestWriter& w) { w.u64(3).bytes("x").bytes("y").bytes("z"); });
  add(req(QueryType::kMultiSet, {"x", "y"}, {"1", "22"}),
      [](RequestWriter& w) { w.i64(2).bytes("x").bytes("1").bytes("y").bytes("22"); });
  add(req(QueryType::kCancelWait), [](RequestWriter&) {});
  add(req(QueryType::kPing, {}, {}, 0, 0xDEADBEEF), [](RequestWriter& w) { w.u32(0xDEADBEEF); });
  add(req(QueryType::kQueuePush, {"q"}, {"item"}),
      [](RequestWriter& w) { w.bytes("q").bytes("item"); });
  add(req(QueryType::kQueuePop, {"q"}), [](RequestWriter& w) { w.bytes("q"); });
  add(req(QueryType::kQueueLen, {"q"}), [](RequestWriter& w) { w.bytes("q"); });
  add(req(QueryType::kListKeys), [](RequestWriter&) {});
  add(req(QueryType::kBarrier, {"b"}, {}, 8), [](RequestWriter& w) { w.bytes("b").i64(8); });
  return cases;
}

}  // namespace

TEST_CASE("every query type survives encoding and decoding after a VALIDATE handshake", "[frame]") {
  auto cases = modern_cases();
  REQUIRE(cases.size() == kMaxQueryType + 1u);
  for (const auto& c : cases) {
    DYNAMIC_SECTION(query_type_name(c.want.type)) {
      Dialect dialect = Dialect::kUnknown;
      Request out;
      std::string hello = validate_frame();
      auto r = parse_request(hello, dialect, Limits{}, out);
      REQUIRE(r.status == ParseStatus::kComplete);
      REQUIRE(r.consumed == 5);
      REQUIRE(dialect == Dialect::kModern);
      CHECK(out.type == QueryType::kValidate);
      CHECK(out.word == kValidationMagic);

      r = parse_request(c.wire, dialect, Limits{}, out);
      REQUIRE(r.status == ParseStatus::kComplete);
      CHECK(r.consumed == c.wire.size());
      require_same(out, c.want);
    }
  }
}

TEST_CASE("a first request of 00 CE F7 85 3C makes the connection modern", "[frame]") {
  std::string hello = validate_frame();
  REQUIRE(hex(hello) == "00cef7853c");
  Dialect dialect = Dialect::kUnknown;
  Request out;
  auto r = parse_request(hello, dialect, Limits{}, out);
  CHECK(r.status == ParseStatus::kComplete);
  CHECK(dialect == Dialect::kModern);

  // Type 0 stays VALIDATE afterwards; legacy would read it as SET.
  std::string again = validate_frame();
  r = parse_request(again, dialect, Limits{}, out);
  CHECK(r.status == ParseStatus::kComplete);
  CHECK(out.type == QueryType::kValidate);
}

TEST_CASE("a type-0 first request shorter than five bytes leaves the dialect undecided",
          "[frame]") {
  std::string hello = validate_frame();
  for (size_t n = 1; n < hello.size(); ++n) {
    Dialect dialect = Dialect::kUnknown;
    Request out;
    auto r = parse_request(std::string_view(hello).substr(0, n), dialect, Limits{}, out);
    INFO("prefix of " << n << " bytes");
    CHECK(r.status == ParseStatus::kIncomplete);
    CHECK(dialect == Dialect::kUnknown);
  }
}

TEST_CASE("any other first request makes the connection legacy with its numbering translated",
          "[frame]") {
  struct LegacyCase {
    uint8_t raw;
    QueryType want;
  };
  const std::vector<LegacyCase> table = {
      {0, QueryType::kSet},        {1, QueryType::kCompareSet}, {2, QueryType::kGet},
      {3, QueryType::kAdd},        {4, QueryType::kCheck},      {5, QueryType::kWait},
      {6, QueryType::kGetNumKeys}, {8, QueryType::kDeleteKey},  {9, QueryType::kAppend},
      {10, QueryType::kMultiGet},  {11, QueryType::kMultiSet},  {12, QueryType::kCancelWait},
  };
  for (const auto& t : table) {
    DYNAMIC_SECTION("legacy type " << int(t.raw) << " is " << query_type_name(t.want)) {
      std::string wire;
      auto w = raw(wire, t.raw);
      Request want = req(t.want);
      switch (t.want) {
        case QueryType::kSet:
        case QueryType::kAppend:
          w.bytes("key").bytes("val");
          want.keys = {"key"};
          want.values = {"val"};
          break;
        case QueryType::kCompareSet:
          w.bytes("key").bytes("exp").bytes("des");
          want.keys = {"key"};
          want.values = {"exp", "des"};
          break;
        case QueryType::kGet:
        case QueryType::kDeleteKey:
          w.bytes("key");
          want.keys = {"key"};
          break;
        case QueryType::kAdd:
          w.bytes("key").i64(7);
          want.keys = {"key"};
          want.number = 7;
          break;
        case QueryType::kCheck:
        case QueryType::kWait:
        case QueryType::kMultiGet:
          w.u64(2).bytes("a").bytes("b");
          want.keys = {"a", "b"};
          break;
        case QueryType::kMultiSet:
          w.u64(1).bytes("a").bytes("1");
          want.keys = {"a"};
          want.values = {"1"};
          break;
        default:
          break;
      }
      Dialect dialect = Dialect::kUnknown;
      Request out;
      auto r = parse_request(wire, dialect, Limits{}, out);
      CHECK(dialect == Dialect::kLegacy);
      REQUIRE(r.status == ParseStatus::kComplete);
      CHECK(r.consumed == wire.size());
      require_same(out, want);
    }
  }
}

TEST_CASE("a legacy connection keeps reading type 0 as SET, even with the magic's bytes",
          "[frame]") {
  Dialect dialect = Dialect::kLegacy;
  std::string wire;
  raw(wire, 0).bytes("k").bytes("v");
  Request out;
  auto r = parse_request(wire, dialect, Limits{}, out);
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(out.type == QueryType::kSet);

  // 00 CE F7 85 3C on a legacy connection is the start of a SET whose key
  // length is far beyond any limit.
  std::string hello = validate_frame() + std::string(4, '\0');
  r = parse_request(hello, dialect, Limits{}, out);
  CHECK(r.status == ParseStatus::kInvalid);
  CHECK(dialect == Dialect::kLegacy);
}

TEST_CASE("legacy WATCH_KEY is refused with a reason", "[frame]") {
  std::string wire;
  raw(wire, 7).bytes("k");
  Dialect dialect = Dialect::kUnknown;
  Request out;
  auto r = parse_request(wire, dialect, Limits{}, out);
  CHECK(dialect == Dialect::kLegacy);
  CHECK(r.status == ParseStatus::kInvalid);
  CHECK_THAT(r.error, Contains("WATCH_KEY"));
}

TEST_CASE("type bytes that no dialect defines are invalid", "[frame]") {
  SECTION("modern") {
    auto bad = GENERATE(as<int>{}, 19, 100, 255);
    std::string wire;
    raw(wire, static_cast<uint8_t>(bad)).bytes("k");
    Dialect dialect = Dialect::kModern;
    Request out;
    auto r = parse_request(wire, dialect, Limits{}, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains(std::to_string(bad)));
  }
  SECTION("legacy") {
    auto bad = GENERATE(as<int>{}, 13, 18, 255);
    std::string wire;
    raw(wire, static_cast<uint8_t>(bad)).bytes("k");
    Dialect dialect = Dialect::kUnknown;
    Request out;
    auto r = parse_request(wire, dialect, Limits{}, out);
    CHECK(dialect == Dialect::kLegacy);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains(std::to_string(bad)));
  }
}

TEST_CASE("a request fed byte by byte is incomplete until its last byte, with sane hints",
          "[frame]") {
  std::string wire;
  RequestWriter(wire)
      .type(QueryType::kMultiSet)
      .u64(2)
      .bytes("alpha")
      .bytes("one")
      .bytes("beta")
      .bytes(std::string(40, 'v'));
  std::string cas;
  RequestWriter(cas).type(QueryType::kCompareSet).bytes("key").bytes("expected").bytes("desired");
  std::string add;
  RequestWriter(add).type(QueryType::kAdd).bytes("counter").i64(1);

  for (const std::string& full : {wire, cas, add}) {
    for (size_t n = 1; n < full.size(); ++n) {
      Dialect dialect = Dialect::kModern;
      Request out;
      auto r = parse_request(std::string_view(full).substr(0, n), dialect, Limits{}, out);
      INFO("request " << hex(full.substr(0, 1)) << ", prefix of " << n << " of " << full.size());
      REQUIRE(r.status == ParseStatus::kIncomplete);
      CHECK(r.consumed == 0);
      // 0 means "unknown"; otherwise more than we have, no more than the whole.
      if (r.needed != 0) {
        CHECK(r.needed > n);
        CHECK(r.needed <= full.size());
      }
    }
    Dialect dialect = Dialect::kModern;
    Request out;
    auto r = parse_request(full, dialect, Limits{}, out);
    CHECK(r.status == ParseStatus::kComplete);
    CHECK(r.consumed == full.size());
  }
}

TEST_CASE("once the last length prefix is in, the hint is the size of the whole request",
          "[frame]") {
  std::string full;
  RequestWriter(full).type(QueryType::kSet).bytes("k").bytes(std::string(1000, 'x'));
  const size_t header = 1 + 8 + 1 + 8;
  for (size_t n : {header, header + 1, header + 500, full.size() - 1}) {
    Dialect dialect = Dialect::kModern;
    Request out;
    auto r = parse_request(std::string_view(full).substr(0, n), dialect, Limits{}, out);
    INFO("prefix of " << n);
    CHECK(r.status == ParseStatus::kIncomplete);
    CHECK(r.needed == full.size());
  }
}

TEST_CASE("the VALIDATE handshake fed byte by byte decides the dialect only when complete",
          "[frame]") {
  std::string hello = validate_frame();
  Dialect dialect = Dialect::kUnknown;
  Request out;
  for (size_t n = 1; n < hello.size(); ++n) {
    auto r = parse_request(std::string_view(hello).substr(0, n), dialect, Limits{}, out);
    REQUIRE(r.status == ParseStatus::kIncomplete);
  }
  CHECK(dialect == Dialect::kUnknown);
  auto r = parse_request(hello, dialect, Limits{}, out);
  CHECK(r.status == ParseStatus::kComplete);
  CHECK(dialect == Dialect::kModern);
}

TEST_CASE("two pipelined requests in one buffer are parsed one after the other", "[frame]") {
  std::string buf;
  RequestWriter(buf).type(QueryType::kSet).bytes("a").bytes("1");
  const size_t first_size = buf.size();
  RequestWriter(buf).type(QueryType::kGet).bytes("a");
  const size_t both = buf.size();
  RequestWriter(buf).type(QueryType::kGet);  // a third, cut short

  Dialect dialect = Dialect::kModern;
  Request out;
  std::string_view rest(buf);
  auto r = parse_request(rest, dialect, Limits{}, out);
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(r.consumed == first_size);
  CHECK(out.type == QueryType::kSet);
  CHECK(out.values == std::vector<std::string>{"1"});

  rest.remove_prefix(r.consumed);
  r = parse_request(rest, dialect, Limits{}, out);
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(r.consumed == both - first_size);
  CHECK(out.type == QueryType::kGet);
  CHECK(out.keys == std::vector<std::string>{"a"});
  CHECK(out.values.empty());

  rest.remove_prefix(r.consumed);
  r = parse_request(rest, dialect, Limits{}, out);
  CHECK(r.status == ParseStatus::kIncomplete);
}

TEST_CASE("lengths over a limit are refused as soon as they are read, naming the field",
          "[frame]") {
  Limits limits;
  limits.max_key_size = 16;
  limits.max_value_size = 32;
  limits.max_keys_per_request = 4;
  Dialect dialect = Dialect::kModern;
  Request out;

  SECTION("a key longer than max_key_size") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kGet).u64(17);
    auto r = parse_request(wire, dialect, limits, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("key") && Contains("17") && Contains("16") && Contains("GET"));
  }
  SECTION("a key of exactly max_key_size is fine") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kGet).bytes(std::string(16, 'k'));
    CHECK(parse_request(wire, dialect, limits, out).status == ParseStatus::kComplete);
  }
  SECTION("a value longer than max_value_size") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kSet).bytes("k").u64(33);
    auto r = parse_request(wire, dialect, limits, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("value") && Contains("33"));
  }
  SECTION("the desired value of COMPARE_SET is held to the value limit too") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kCompareSet).bytes("k").bytes("").u64(33);
    auto r = parse_request(wire, dialect, limits, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("value"));
  }
  SECTION("a value of exactly max_value_size is fine") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kSet).bytes("k").bytes(std::string(32, 'v'));
    CHECK(parse_request(wire, dialect, limits, out).status == ParseStatus::kComplete);
  }
  SECTION("a key count over max_keys_per_request") {
    auto type =
        GENERATE(QueryType::kCheck, QueryType::kWait, QueryType::kMultiGet, QueryType::kMultiSet);
    std::string wire;
    RequestWriter(wire).type(type).u64(5);
    auto r = parse_request(wire, dialect, limits, out);
    INFO(query_type_name(type));
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("keys") && Contains("5"));
  }
  SECTION("a key length of 2^63 with the default limits") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kSet).u64(uint64_t{1} << 63);
    REQUIRE(wire.size() == 9);
    auto r = parse_request(wire, dialect, Limits{}, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("key") && Contains("9223372036854775808"));
  }
  SECTION("a value length of 2^64-1 with the default limits") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kQueuePush).bytes("q").u64(~uint64_t{0});
    auto r = parse_request(wire, dialect, Limits{}, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("value"));
  }
}

TEST_CASE("keys and values of one request together are held to max_request_size", "[frame]") {
  Limits limits;
  limits.max_key_size = 1000;
  limits.max_value_size = 1000;
  limits.max_request_size = 64;
  Dialect dialect = Dialect::kModern;
  Request out;

  SECTION("refused when the length that crosses it is read") {
    std::string wire;
    RequestWriter(wire).type(QueryType::kSet).bytes(std::string(10, 'k')).u64(55);
    auto r = parse_request(wire, dialect, limits, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("request") && Contains("64"));
  }
  SECTION("accepted at exactly the limit") {
    std::string wire;
    RequestWriter(wire)
        .type(QueryType::kSet)
        .bytes(std::string(10, 'k'))
        .bytes(std::string(54, 'v'));
    CHECK(parse_request(wire, dialect, limits, out).status == ParseStatus::kComplete);
  }
  SECTION("many small keys add up") {
    std::string wire;
    auto w = RequestWriter(wire).type(QueryType::kMultiGet).u64(4);
    for (int i = 0; i < 3; ++i) w.bytes(std::string(20, 'k'));
    w.u64(20);
    auto r = parse_request(wire, dialect, limits, out);
    CHECK(r.status == ParseStatus::kInvalid);
    CHECK_THAT(r.error, Contains("request"));
  }
}

TEST_CASE("ReplyWriter writes little-endian integers and u64-length-prefixed bytes", "[frame]") {
  std::string out;
  ReplyWriter w(out);
  SECTION("u8") {
    w.u8(0xAB);
    CHECK(hex(out) == "ab");
  }
  SECTION("u32") {
    w.u32(0x01020304);
    CHECK(hex(out) == "04030201");
  }
  SECTION("i64") {
    w.i64(0x0102030405060708);
    w.i64(-2);
    CHECK(hex(out) ==
          "0807060504030201"
          "feffffffffffffff");
  }
  SECTION("bytes") {
    w.bytes("hi");
    w.bytes("");
    w.bytes(std::string_view("\0", 1));
    CHECK(hex(out) ==
          "0200000000000000"
          "6869"
          "0000000000000000"
          "0100000000000000"
          "00");
  }
}

TEST_CASE("RequestWriter writes the type byte, little-endian integers and prefixed bytes",
          "[frame]") {
  std::string out;
  RequestWriter(out).type(QueryType::kBarrier).bytes("ab").i64(-1).u32(0x0A0B0C0D).u64(258);
  CHECK(hex(out) ==
        "12"
        "0200000000000000"
        "6162"
        "ffffffffffffffff"
        "0d0c0b0a"
        "0201000000000000");
}
