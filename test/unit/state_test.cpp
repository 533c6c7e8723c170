// The store's key-value state, its waiters, queues and barriers; and the
// Handler that turns decoded requests into reply bytes.
#include "store/state.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "store/handler.hpp"

using namespace elasticrun::store;
using Catch::Matchers::UnorderedEquals;

namespace {

std::string value_of(const State& s, const std::string& key) {
  const std::string* v = s.get(key);
  REQUIRE(v != nullptr);
  return *v;
}

}  // namespace

TEST_CASE("set stores a value that get returns, replacing an earlier one", "[state]") {
  State s;
  Wakeups woken;
  CHECK(s.get("k") == nullptr);
  s.set("k", "one", woken);
  CHECK(value_of(s, "k") == "one");
  s.set("k", std::string("t\0o", 3), woken);
  CHECK(value_of(s, "k") == std::string("t\0o", 3));
  s.set("", "", woken);
  CHECK(value_of(s, "").empty());
  CHECK(woken.empty());
}

namespace {

// Makes key present (value "1") while client 1 waits on it. A plain wait on
// a present key returns at once, but a barrier arrival far from complete
// stores its counter without waking anyone, as in PyTorch.
void present_with_waiter(State& s, const std::string& key) {
  Wakeups none;
  REQUIRE_FALSE(s.wait(1, {key}));
  REQUIRE(s.barrier(2, key, 100, none) == false);
  REQUIRE(none.empty());
  REQUIRE(value_of(s, key) == "1");
  REQUIRE(s.waiting(1));
}

}  // namespace

TEST_CASE("compare_set on a missing key with empty expected stores and returns desired",
          "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"k"}));
  CHECK(s.compare_set("k", "", "new", woken) == "new");
  CHECK(value_of(s, "k") == "new");
  CHECK(woken == Wakeups{1});
}

TEST_CASE("compare_set on a missing key with non-empty expected returns expected, stores nothing",
          "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"k"}));
  CHECK(s.compare_set("k", "guess", "new", woken) == "guess");
  CHECK(s.get("k") == nullptr);
  // PyTorch wakes waiters even here, though the key is still absent.
  CHECK(woken == Wakeups{1});
}

TEST_CASE("compare_set on a present key with matching expected replaces it and wakes waiters",
          "[state]") {
  State s;
  Wakeups woken;
  present_with_waiter(s, "k");
  CHECK(s.compare_set("k", "1", "new", woken) == "new");
  CHECK(value_of(s, "k") == "new");
  std::sort(woken.begin(), woken.end());
  CHECK(woken == Wakeups{1, 2});
}

TEST_CASE("compare_set on a present key with another value returns it and still wakes waiters",
          "[state]") {
  State s;
  Wakeups woken;
  present_with_waiter(s, "k");
  CHECK(s.compare_set("k", "other", "new", woken) == "1");
  CHECK(value_of(s, "k") == "1");
  std::sort(woken.begin(), woken.end());
  CHECK(woken == Wakeups{1, 2});
}

TEST_CASE("add creates, increments and stores decimal text", "[state]") {
  State s;
  Wakeups woken;
  CHECK(s.add("n", 5, woken) == 5);
  CHECK(value_of(s, "n") == "5");
  CHECK(s.add("n", -8, woken) == -3);
  CHECK(value_of(s, "n") == "-3");
  CHECK(s.add("n", 0, woken) == -3);

  SECTION("an existing decimal value set by SET is parsed") {
    s.set("m", " 40 apples", woken);
    CHECK(s.add("m", 2, woken) == 42);
    CHECK(value_of(s, "m") == "42");
  }
  SECTION("a non-numeric value is refused and left alone") {
    s.set("m", "apples", woken);
    CHECK_FALSE(s.add("m", 1, woken).has_value());
    CHECK(value_of(s, "m") == "apples");
  }
  SECTION("an empty value is refused") {
    s.set("m", "", woken);
    CHECK_FALSE(s.add("m", 1, woken).has_value());
  }
  SECTION("overflow is refused and leaves the value alone") {
    const auto max = std::numeric_limits<int64_t>::max();
    const auto min = std::numeric_limits<int64_t>::min();
    CHECK(s.add("big", max, woken) == max);
    CHECK_FALSE(s.add("big", 1, woken).has_value());
    CHECK(value_of(s, "big") == "9223372036854775807");
    CHECK(s.add("small", min, woken) == min);
    CHECK(value_of(s, "small") == "-9223372036854775808");
    CHECK_FALSE(s.add("small", -1, woken).has_value());
  }
}

TEST_CASE("add wakes waiters, but a refused add does not", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"n"}));
  s.add("n", 1, woken);
  CHECK(woken == Wakeups{1});

  State t;
  woken.clear();
  present_with_waiter(t, "k");
  CHECK_FALSE(t.add("k", std::numeric_limits<int64_t>::max(), woken).has_value());
  CHECK(woken.empty());
  CHECK(t.waiting(1));
}

TEST_CASE("parse_counter follows strtoll's rules", "[state]") {
  CHECK(parse_counter("0") == 0);
  CHECK(parse_counter("42") == 42);
  CHECK(parse_counter("-17") == -17);
  CHECK(parse_counter("+5") == 5);
  CHECK(parse_counter(" \t\n\v\f\r12") == 12);
  CHECK(parse_counter("12abc") == 12);
  CHECK(parse_counter("7 8") == 7);
  CHECK(parse_counter("0x10") == 0);
  CHECK(parse_counter("9223372036854775807") == std::numeric_limits<int64_t>::max());
  CHECK(parse_counter("-9223372036854775808") == std::numeric_limits<int64_t>::min());

  CHECK_FALSE(parse_counter("").has_value());
  CHECK_FALSE(parse_counter("   ").has_value());
  CHECK_FALSE(parse_counter("abc").has_value());
  CHECK_FALSE(parse_counter("+").has_value());
  CHECK_FALSE(parse_counter("-").has_value());
  CHECK_FALSE(parse_counter("- 5").has_value());
  CHECK_FALSE(parse_counter("+ 5").has_value());
  CHECK_FALSE(parse_counter("++5").has_value());
  CHECK_FALSE(parse_counter("9223372036854775808").has_value());
  CHECK_FALSE(parse_counter("-9223372036854775809").has_value());
}

TEST_CASE("parse_counter refuses two signs like strtoll does", "[state]") {
  // strtoll("+-5") and std::stoll("+-5") convert nothing; so should we.
  CHECK_FALSE(parse_counter("+-5").has_value());
}

TEST_CASE("append creates a key or concatenates, and wakes waiters", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"k"}));
  s.append("k", "ab", woken);
  CHECK(value_of(s, "k") == "ab");
  CHECK(woken == Wakeups{1});
  s.append("k", std::string("\0c", 2), woken);
  CHECK(value_of(s, "k") == std::string("ab\0c", 4));
}

TEST_CASE("erase removes a key and says whether it existed", "[state]") {
  State s;
  Wakeups woken;
  s.set("k", "v", woken);
  CHECK(s.erase("k"));
  CHECK(s.get("k") == nullptr);
  CHECK_FALSE(s.erase("k"));
  CHECK(s.num_keys() == 0);
}

TEST_CASE("num_keys and list_keys count keys but not queues", "[state]") {
  State s;
  Wakeups woken;
  s.set("a", "1", woken);
  s.add("b", 1, woken);
  s.append("c", "x", woken);
  s.queue_push("q", "item", woken);
  s.queue_push("a", "item", woken);  // a queue may share a key's name
  CHECK(s.num_keys() == 3);
  CHECK_THAT(s.list_keys(), UnorderedEquals(std::vector<std::string>{"a", "b", "c"}));
  s.erase("b");
  CHECK(s.num_keys() == 2);
  CHECK_THAT(s.list_keys(), UnorderedEquals(std::vector<std::string>{"a", "c"}));
}

TEST_CASE("a wait on keys that all exist returns at once and registers nothing", "[state]") {
  State s;
  Wakeups woken;
  s.set("a", "1", woken);
  s.set("b", "2", woken);
  CHECK(s.wait(1, {"a", "b", "a"}));
  CHECK(s.wait(2, {}));
  CHECK_FALSE(s.waiting(1));
  CHECK_FALSE(s.waiting(2));
  CHECK(s.waiter_count() == 0);
  CHECK(s.all_ready({"a", "b"}));
  CHECK(s.all_ready({}));
  CHECK_FALSE(s.all_ready({"a", "zz"}));
}

TEST_CASE("a wait on several keys completes only when the last missing one arrives", "[state]") {
  State s;
  Wakeups woken;
  s.set("present", "x", woken);
  REQUIRE_FALSE(s.wait(1, {"a", "present", "b", "c"}));
  CHECK(s.waiting(1));
  s.set("a", "1", woken);
  s.add("c", 1, woken);
  CHECK(woken.empty());
  CHECK(s.waiting(1));
  s.append("b", "x", woken);
  CHECK(woken == Wakeups{1});
  CHECK_FALSE(s.waiting(1));

  // Setting a key again wakes nobody: the wait is over.
  woken.clear();
  s.set("a", "2", woken);
  CHECK(woken.empty());
}

TEST_CASE("a key named twice in one wait is needed once", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"a", "b", "a"}));
  s.set("a", "1", woken);
  CHECK(woken.empty());
  s.set("b", "1", woken);
  CHECK(woken == Wakeups{1});
  CHECK(s.waiter_count() == 0);
}

TEST_CASE("set, add and append each wake every client waiting on the key", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"k"}));
  REQUIRE_FALSE(s.wait(2, {"k"}));
  REQUIRE_FALSE(s.wait(3, {"other"}));

  SECTION("set") {
    s.set("k", "v", woken);
  }
  SECTION("add") {
    s.add("k", 1, woken);
  }
  SECTION("append") {
    s.append("k", "v", woken);
  }
  std::sort(woken.begin(), woken.end());
  CHECK(woken == Wakeups{1, 2});
  CHECK(s.waiting(3));
}

TEST_CASE("deleting a key wakes nobody and leaves its waiters registered", "[state]") {
  State s;
  Wakeups woken;
  s.set("k", "v", woken);
  REQUIRE_FALSE(s.wait(1, {"k", "m"}));
  s.erase("k");
  s.erase("m");
  CHECK(s.waiting(1));
  s.set("m", "1", woken);
  CHECK(woken == Wakeups{1});
}

TEST_CASE("a cancelled wait is not woken by a later set", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"k", "j"}));
  REQUIRE_FALSE(s.wait(2, {"k"}));
  CHECK(s.cancel_wait(1));
  CHECK_FALSE(s.waiting(1));
  CHECK_FALSE(s.cancel_wait(1));
  s.set("k", "v", woken);
  s.set("j", "v", woken);
  CHECK(woken == Wakeups{2});
  CHECK(s.waiter_count() == 0);
}

TEST_CASE("a new wait replaces the client's earlier one", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"old"}));
  REQUIRE_FALSE(s.wait(1, {"new"}));
  CHECK(s.waiter_count() == 1);
  s.set("old", "v", woken);
  CHECK(woken.empty());
  s.set("new", "v", woken);
  CHECK(woken == Wakeups{1});
}

TEST_CASE("queues pop in push order and report the length before the pop", "[state]") {
  State s;
  Wakeups woken;
  CHECK(s.queue_len("q") == 0);
  CHECK(s.queue_pop("q") == std::pair<int64_t, std::string>{0, ""});
  s.queue_push("q", "first", woken);
  s.queue_push("q", "second", woken);
  s.queue_push("q", "", woken);
  CHECK(s.queue_len("q") == 3);
  CHECK(s.queue_pop("q") == std::pair<int64_t, std::string>{3, "first"});
  CHECK(s.queue_pop("q") == std::pair<int64_t, std::string>{2, "second"});
  CHECK(s.queue_pop("q") == std::pair<int64_t, std::string>{1, ""});
  CHECK(s.queue_pop("q") == std::pair<int64_t, std::string>{0, ""});
  CHECK(s.queue_len("q") == 0);
  CHECK(s.get("q") == nullptr);
  CHECK(woken.empty());
}

TEST_CASE("a queue key is ready only while its queue is non-empty", "[state]") {
  State s;
  Wakeups woken;
  CHECK_FALSE(s.ready("q"));
  s.queue_push("q", "x", woken);
  CHECK(s.ready("q"));
  CHECK(s.wait(1, {"q"}));
  s.queue_pop("q");
  CHECK_FALSE(s.ready("q"));
  CHECK_FALSE(s.wait(1, {"q"}));
  CHECK(s.waiting(1));
}

TEST_CASE("a queue push wakes exactly one waiter, the earliest", "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(7, {"q"}));
  REQUIRE_FALSE(s.wait(3, {"q"}));
  REQUIRE_FALSE(s.wait(5, {"q"}));

  s.queue_push("q", "a", woken);
  CHECK(woken == Wakeups{7});
  CHECK_FALSE(s.waiting(7));
  CHECK(s.waiting(3));
  CHECK(s.waiting(5));

  // The element is still there for the woken client to pop.
  CHECK(s.queue_len("q") == 1);
  s.queue_push("q", "b", woken);
  CHECK(woken == Wakeups{7, 3});
  s.queue_push("q", "c", woken);
  CHECK(woken == Wakeups{7, 3, 5});
  s.queue_push("q", "d", woken);
  CHECK(woken == Wakeups{7, 3, 5});
  CHECK(s.waiter_count() == 0);
}

TEST_CASE(
    "a queue push passes over a waiter that still needs other keys, which the last key then "
    "releases",
    "[state]") {
  State s;
  Wakeups woken;
  REQUIRE_FALSE(s.wait(1, {"q", "other"}));
  REQUIRE_FALSE(s.wait(2, {"q"}));
  s.queue_push("q", "a", woken);
  CHECK(woken == Wakeups{2});
  CHECK(s.waiting(1));
  // The queue counted as arrived for client 1: its other key completes it.
  s.set("other", "x", woken);
  CHECK(woken == Wakeups{2, 1});
  CHECK(s.waiter_count() == 0);
}

TEST_CASE("a barrier releases everyone when world_size clients have arrived", "[state]") {
  State s;
  Wakeups woken;
  CHECK(s.barrier(1, "b", 3, woken) == false);
  CHECK(s.waiting(1));
  CHECK(value_of(s, "b") == "1");
  CHECK(s.barrier(2, "b", 3, woken) == false);
  CHECK(value_of(s, "b") == "2");
  CHECK(woken.empty());
  CHECK(s.barrier(3, "b", 3, woken) == true);
  CHECK(value_of(s, "b") == "3");
  std::sort(woken.begin(), woken.end());
  CHECK(woken == Wakeups{1, 2});
  CHECK_FALSE(s.waiting(3));
  CHECK(s.waiter_count() == 0);

  // The counter is never reset: the next round on the same key passes at once.
  woken.clear();
  CHECK(s.barrier(4, "b", 3, woken) == true);
  CHECK(value_of(s, "b") == "4");
}

TEST_CASE("a barrier of one passes at once", "[state]") {
  State s;
  Wakeups woken;
  CHECK(s.barrier(1, "solo", 1, woken) == true);
  CHECK_FALSE(s.waiting(1));
  CHECK(woken.empty());
}

TEST_CASE("a cancelled barrier arrival is not released, but still counts", "[state]") {
  State s;
  Wakeups woken;
  CHECK(s.barrier(1, "b", 2, woken) == false);
  CHECK(s.cancel_wait(1));
  CHECK(s.barrier(2, "b", 2, woken) == true);
  CHECK(woken.empty());
}

TEST_CASE("a barrier on a key holding a non-integer fails", "[state]") {
  State s;
  Wakeups woken;
  s.set("b", "not a number", woken);
  CHECK_FALSE(s.barrier(1, "b", 2, woken).has_value());
  CHECK(value_of(s, "b") == "not a number");
  CHECK_FALSE(s.waiting(1));

  s.set("c", "9223372036854775807", woken);
  CHECK_FALSE(s.barrier(1, "c", 2, woken).has_value());
}

// --- Handler: requests in, reply bytes out.

namespace {

Request make(QueryType t, std::vector<std::string> keys = {},
             std::vector<std::string> values = {}) {
  Request r;
  r.type = t;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

}  // namespace

TEST_CASE("the handler answers GET of a missing key with an empty value", "[state][handler]") {
  Handler h{Limits{}};
  Wakeups woken;
  std::string reply;
  auto get = make(QueryType::kGet, {"absent"});
  CHECK(h.handle(1, get, reply, woken).ok);
  CHECK(reply == le64(0));

  auto set = make(QueryType::kSet, {"k"}, {"val"});
  reply.clear();
  CHECK(h.handle(1, set, reply, woken).ok);
  CHECK(reply.empty());
  get = make(QueryType::kGet, {"k"});
  CHECK(h.handle(1, get, reply, woken).ok);
  CHECK(reply == le64(3) + "val");
}

TEST_CASE("the handler always answers CANCEL_WAIT with WAIT_CANCELED", "[state][handler]") {
  Handler h{Limits{}};
  Wakeups woken;
  std::string reply;

  SECTION("with nothing pending") {
    auto cancel = make(QueryType::kCancelWait);
    CHECK(h.handle(1, cancel, reply, woken).ok);
    CHECK(reply == std::string(1, '\x01'));
  }
  SECTION("with a pending wait, which is then forgotten") {
    auto wait = make(QueryType::kWait, {"k"});
    CHECK(h.handle(1, wait, reply, woken).ok);
    CHECK(reply.empty());
    auto cancel = make(QueryType::kCancelWait);
    CHECK(h.handle(1, cancel, reply, woken).ok);
    CHECK(reply == std::string(1, '\x01'));
    auto set = make(QueryType::kSet, {"k"}, {"v"});
    CHECK(h.handle(2, set, reply, woken).ok);
    CHECK(woken.empty());
  }
}

TEST_CASE("the handler refuses VALIDATE with a wrong magic", "[state][handler]") {
  Handler h{Limits{}};
  Wakeups woken;
  std::string reply;
  auto validate = make(QueryType::kValidate);
  validate.word = kValidationMagic ^ 1;
  auto r = h.handle(1, validate, reply, woken);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.error.empty());

  validate.word = kValidationMagic;
  CHECK(h.handle(1, validate, reply, woken).ok);
  CHECK(reply.empty());
}

TEST_CASE("the handler closes a connection whose ADD hits a non-integer", "[state][handler]") {
  Handler h{Limits{}};
  Wakeups woken;
  std::string reply;
  auto set = make(QueryType::kSet, {"k"}, {"word"});
  REQUIRE(h.handle(1, set, reply, woken).ok);
  auto add = make(QueryType::kAdd, {"k"});
  add.number = 1;
  auto r = h.handle(1, add, reply, woken);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.error, Catch::Matchers::Contains("'k'"));
}

TEST_CASE("the handler's MULTI_SET wakes the waiters of every key it sets", "[state][handler]") {
  Handler h{Limits{}};
  Wakeups woken;
  std::string reply;
  auto wait1 = make(QueryType::kWait, {"a", "b"});
  auto wait2 = make(QueryType::kWait, {"b"});
  auto wait3 = make(QueryType::kWait, {"c"});
  REQUIRE(h.handle(1, wait1, reply, woken).ok);
  REQUIRE(h.handle(2, wait2, reply, woken).ok);
  REQUIRE(h.handle(3, wait3, reply, woken).ok);
  REQUIRE(reply.empty());
  auto mset = make(QueryType::kMultiSet, {"a", "b"}, {"1", "2"});
  CHECK(h.handle(4, mset, reply, woken).ok);
  CHECK(reply.empty());
  std::sort(woken.begin(), woken.end());
  CHECK(woken == Wakeups{1, 2});
  CHECK(h.state().waiting(3));
}
