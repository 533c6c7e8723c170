// etcd's JSON gateway format (etcd/codec): what is sent, and replies as a
// real etcd 3.4 wrote them.
#include <catch2/catch.hpp>
#include <random>

#include "elasticrun/errors.hpp"
#include "etcd/codec.hpp"

namespace elasticrun::etcd {

TEST_CASE("base64 round-trips every byte string and refuses what is not base64", "[etcd]") {
  REQUIRE(base64("") == "");
  REQUIRE(base64("foo") == "Zm9v");
  REQUIRE(base64("fo") == "Zm8=");
  REQUIRE(base64("f") == "Zg==");
  std::mt19937 rng(7);
  for (int n = 0; n < 200; ++n) {
    std::string bytes(static_cast<size_t>(n), '\0');
    for (auto& b : bytes) b = static_cast<char>(rng());
    REQUIRE(unbase64(base64(bytes)) == bytes);
  }
  REQUIRE_THROWS_AS(unbase64("Zm9"), StoreError);
  REQUIRE_THROWS_AS(unbase64("Zm9*"), StoreError);
  REQUIRE_THROWS_AS(unbase64("Z=9v"), StoreError);
}

TEST_CASE("a prefix's range ends past every key that starts with it", "[etcd]") {
  REQUIRE(prefix_end("/elasticrun/job/") == "/elasticrun/job0");
  REQUIRE(prefix_end(std::string("a\xff", 2)) == "b");
  REQUIRE(prefix_end(std::string("\xff\xff", 2)) == std::string(1, '\0'));
}

TEST_CASE("a transaction is written as the gateway reads it", "[etcd]") {
  const Json t = txn_request({Compare{Compare::Target::kCreate, Compare::Result::kEqual, "k", 0}},
                             {Put{"k", "v", 7, true}}, {Range{"k", "", true, false}});
  REQUIRE(t["compare"][0]["target"] == "CREATE");
  REQUIRE(t["compare"][0]["result"] == "EQUAL");
  REQUIRE(t["compare"][0]["create_revision"] == "0");
  REQUIRE(t["compare"][0]["key"] == "aw==");
  REQUIRE(t["success"][0]["request_put"]["value"] == "dg==");
  REQUIRE(t["success"][0]["request_put"]["lease"] == "7");
  REQUIRE(t["success"][0]["request_put"]["prev_kv"] == true);
  REQUIRE(t["failure"][0]["request_range"]["count_only"] == true);
  REQUIRE_FALSE(t["failure"][0]["request_range"].contains("range_end"));
}

TEST_CASE("replies are read with their omitted zero fields", "[etcd]") {
  // As etcd 3.4.23 answered a failed transaction and a put with prev_kv.
  const TxnReply t = parse_txn(Json::parse(
      R"({"header":{"cluster_id":"3","member_id":"3","revision":"3","raft_term":"2"},)"
      R"("responses":[{"response_range":{"header":{"revision":"3"},"kvs":[{"key":"Zm9v",)"
      R"("create_revision":"2","mod_revision":"3","version":"2","value":"YmFy"}],"count":"1"}}]})"));
  REQUIRE_FALSE(t.succeeded);
  REQUIRE(t.revision == 3);
  const auto& r = std::get<RangeReply>(t.responses.at(0));
  REQUIRE(r.kvs.at(0).key == "foo");
  REQUIRE(r.kvs.at(0).value == "bar");
  REQUIRE(r.kvs.at(0).version == 2);
  const PutReply p = parse_put(
      Json::parse(R"({"header":{"revision":"3"},"prev_kv":{"key":"Zm9v","create_revision":"2",)"
                  R"("mod_revision":"2","version":"1","value":"YmFy"}})"));
  REQUIRE(p.prev_kv->mod_revision == 2);
  const RangeReply none = parse_range(Json::parse(R"({"header":{"revision":"3"}})"));
  REQUIRE(none.kvs.empty());
  REQUIRE(none.count == 0);
  REQUIRE_THROWS_AS(parse_range(Json::parse(R"({"count":"x"})")), StoreError);
}

TEST_CASE("a watch's stream messages and etcd's errors are told apart", "[etcd]") {
  const WatchMessage created =
      parse_watch(Json::parse(R"({"result":{"header":{"revision":"3"},"created":true}})"));
  REQUIRE(created.created);
  REQUIRE(created.events.empty());
  const WatchMessage put = parse_watch(
      Json::parse(R"({"result":{"header":{"revision":"4"},"events":[{"kv":{"key":"d2s=",)"
                  R"("create_revision":"4","mod_revision":"4","version":"1","value":"eA=="}},)"
                  R"({"type":"DELETE","kv":{"key":"d2s=","mod_revision":"5"}}]}})"));
  REQUIRE(put.events.size() == 2);
  REQUIRE_FALSE(put.events[0].deleted);
  REQUIRE(put.events[0].kv.key == "wk");
  REQUIRE(put.events[1].deleted);
  const WatchMessage compacted =
      parse_watch(Json::parse(R"({"result":{"canceled":true,"compact_revision":"9"}})"));
  REQUIRE(compacted.compact_revision == 9);

  const auto e = error_of(Json::parse(
      R"({"error":"etcdserver: duplicate key given in txn request","message":"etcdserver: duplicate key given in txn request","code":3})"));
  REQUIRE(e);
  REQUIRE(e->code == 3);
  const auto s = error_of(Json::parse(
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}})"));
  REQUIRE(s);
  REQUIRE(s->code == 14);
  REQUIRE(s->message == "etcdserver: no leader");
  REQUIRE_FALSE(error_of(Json::parse(R"({"header":{"revision":"1"}})")));
  REQUIRE(parse_lease(Json::parse(R"({"result":{"header":{},"ID":"12"}})")).ttl_s == 0);
}

}  // namespace elasticrun::etcd
