// The standby's stream (store/replica.hpp): records made and parsed in one
// place, the State's journal rebuilding an equal State, and the primary
// holding every reply after a change until its standby acknowledged it.
#include <catch2/catch.hpp>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "server_fixture.hpp"
#include "store/replica.hpp"
#include "store/standby.hpp"

using elasticrun::NetworkError;
using elasticrun::StoreClient;
using elasticrun::StoreClientOptions;
using elasticrun::store::Change;
using elasticrun::store::Limits;
using elasticrun::store::parse_replica_record;
using elasticrun::store::ParseStatus;
using elasticrun::store::QueryType;
using elasticrun::store::ReplicaRecord;
using elasticrun::store::RequestWriter;
using elasticrun::store::StandbyFollower;
using elasticrun::store::State;
using elasticrun::store::Wakeups;
using elasticrun::test::RawConnection;
using elasticrun::test::ServerFixture;
namespace frames = elasticrun::test::frames;

namespace {

// Reads one record from a standby's connection.
ReplicaRecord read_record(RawConnection& c) {
  std::string buf;
  ReplicaRecord rec;
  for (;;) {
    buf += c.read(1);
    auto r = parse_replica_record(buf, Limits{}, rec);
    if (r.status == ParseStatus::kComplete) return rec;
    REQUIRE(r.status == ParseStatus::kIncomplete);
  }
}

std::string ack(uint64_t seq) {
  std::string out;
  elasticrun::store::write_ack(out, seq);
  return out;
}

// A store, its standby and the standby's follower, attached.
struct StoreWithStandby {
  static elasticrun::store::ServerOptions standby_options() {
    elasticrun::store::ServerOptions o;
    o.standby = true;
    return o;
  }
  static StandbyFollower::Options follower_options(const ServerFixture& primary,
                                                   const ServerFixture& standby) {
    StandbyFollower::Options fo;
    fo.primary_host = "127.0.0.1";
    fo.primary_port = primary.port();
    fo.endpoint = "127.0.0.1:" + std::to_string(standby.port());
    fo.probe_timeout = std::chrono::milliseconds(300);
    return fo;
  }
  StoreWithStandby() {
    REQUIRE(primary.eventually([](const auto& s) { return s.has_standby; }));
  }
  // The options of a client that knows the standby.
  StoreClientOptions client_options() const {
    StoreClientOptions o;
    o.connect_timeout = std::chrono::seconds(20);
    o.timeout = std::chrono::seconds(20);
    o.standbys = {{"127.0.0.1", standby.port()}};
    return o;
  }

  ServerFixture primary;
  ServerFixture standby{standby_options()};
  StandbyFollower follower{follower_options(primary, standby)};
};

}  // namespace

TEST_CASE("replica records round-trip, and a cut or bad record is told apart", "[replica]") {
  std::string bytes;
  const Change put{Change::Kind::kPut, "/k", std::string("v\0w", 3)};
  elasticrun::store::write_change(bytes, 7, put);
  elasticrun::store::write_synced(bytes, 9, 0xfeedULL);
  ReplicaRecord rec;
  for (size_t cut = 0; cut < bytes.size() - 17; ++cut) {
    CHECK(parse_replica_record(bytes.substr(0, cut), Limits{}, rec).status ==
          ParseStatus::kIncomplete);
  }
  auto r = parse_replica_record(bytes, Limits{}, rec);
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(rec.tag == ReplicaRecord::Tag::kChange);
  CHECK(rec.seq == 7);
  CHECK(rec.change == put);
  r = parse_replica_record(std::string_view(bytes).substr(r.consumed), Limits{}, rec);
  REQUIRE(r.status == ParseStatus::kComplete);
  CHECK(rec.tag == ReplicaRecord::Tag::kSynced);
  CHECK(rec.seq == 9);
  CHECK(rec.store_id == 0xfeedULL);

  std::string bad = bytes;
  bad[0] = 9;
  r = parse_replica_record(bad, Limits{}, rec);
  CHECK(r.status == ParseStatus::kInvalid);
  CHECK_THAT(r.error, Catch::Contains("unknown tag"));
  bad = bytes;
  bad[9] = 6;  // the change's kind
  CHECK(parse_replica_record(bad, Limits{}, rec).status == ParseStatus::kInvalid);
  Limits small;
  small.max_key_size = 1;
  r = parse_replica_record(bytes, small, rec);
  CHECK(r.status == ParseStatus::kInvalid);
  CHECK_THAT(r.error, Catch::Contains("key of 2 bytes"));
}

TEST_CASE("a State's journal and snapshot rebuild an equal State", "[replica]") {
  std::mt19937 rng(20261204);
  State primary, from_journal;
  std::vector<Change> journal;
  primary.set_journal(&journal);
  Wakeups woken;
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "k" + std::to_string(rng() % 12);
    const std::string value = std::to_string(rng() % 1000);
    switch (rng() % 9) {
      case 0:
        primary.set(key, value, woken);
        break;
      case 1:
        (void)primary.compare_set(key, value, "x" + value, woken);
        break;
      case 2:
        (void)primary.compare_set(key, "", value, woken);
        break;
      case 3:
        (void)primary.add(key, static_cast<int64_t>(rng() % 5), woken);
        break;
      case 4:
        primary.append(key, value, woken);
        break;
      case 5:
        (void)primary.erase(key);
        break;
      case 6:
        primary.queue_push("q" + key, value, woken);
        break;
      case 7:
        (void)primary.queue_pop("q" + key);
        break;
      case 8:
        (void)primary.barrier(1, "b" + key, 1000000, woken);
        break;
    }
    for (const Change& c : journal) from_journal.apply(c);
    journal.clear();
    REQUIRE(from_journal == primary);
  }
  State from_snapshot;
  for (const Change& c : primary.snapshot()) from_snapshot.apply(c);
  CHECK(from_snapshot == primary);
  // A read, a wait and a failed compare change nothing.
  (void)primary.get("k1");
  (void)primary.wait(3, {"never"});
  (void)primary.compare_set("k-none", "not-there", "v", woken);
  CHECK(journal.empty());
}

TEST_CASE("a store with a standby answers a client only after the standby has its change",
          "[replica][server]") {
  ServerFixture fx;
  StoreClient writer = fx.client();
  writer.set("before", "1");
  writer.queue_push("jobs", "a");

  RawConnection standby(fx.port());
  std::string hello = frames::validate() + frames::ping(1);
  RequestWriter(hello).type(QueryType::kReplicate).bytes("127.0.0.1:1234");
  standby.send(hello);
  REQUIRE(standby.read_u32() == 1);
  // The snapshot, then SYNCED at its last number.
  State copy;
  ReplicaRecord rec = read_record(standby);
  uint64_t last = 0;
  while (rec.tag == ReplicaRecord::Tag::kChange) {
    CHECK(rec.seq == last + 1);
    last = rec.seq;
    copy.apply(rec.change);
    rec = read_record(standby);
  }
  CHECK(rec.seq == last);
  CHECK(*copy.get("/before") == "1");
  CHECK(copy.queue_len("/jobs") == 1);
  REQUIRE(fx.stats().has_standby);

  // Until the standby acknowledges the snapshot and the SET, the writer
  // waits; so does a reader that comes after the SET.
  // (ADD, not SET: a SET has no reply to hold.)
  auto set = std::async(std::launch::async, [&] { return writer.add("after", 2); });
  rec = read_record(standby);
  CHECK(rec.seq == last + 1);
  CHECK(rec.change == Change{Change::Kind::kPut, "/after", "2"});
  StoreClient reader = fx.client();  // PING tells nothing of the data: answered
  auto get = std::async(std::launch::async, [&] { return reader.get("after"); });
  CHECK(set.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  CHECK(get.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  standby.send(ack(last));  // the snapshot only: still held
  CHECK(set.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  standby.send(ack(last + 1));
  CHECK(set.get() == 2);
  CHECK(get.get() == "2");

  // A standby that goes releases what it held: the store serves on alone.
  auto second = std::async(std::launch::async, [&] { return writer.add("third", 3); });
  (void)read_record(standby);
  standby.close();
  CHECK(second.get() == 3);
  CHECK(fx.eventually([](const auto& s) { return !s.has_standby; }));
  CHECK(writer.get("third") == "3");
  CHECK(fx.stats().changes_replicated == 2);
}

TEST_CASE("a second standby and a bad acknowledgement are refused", "[replica][server]") {
  ServerFixture fx;
  auto attach = [&](RawConnection& c) {
    std::string f = frames::validate() + frames::ping(1);
    RequestWriter(f).type(QueryType::kReplicate).bytes("s");
    c.send(f);
  };
  RawConnection first(fx.port());
  attach(first);
  REQUIRE(first.read_u32() == 1);
  REQUIRE(read_record(first).tag == ReplicaRecord::Tag::kSynced);
  RawConnection second(fx.port());
  attach(second);
  CHECK(second.closed_by_server());
  CHECK(fx.stats().has_standby);
  first.send(ack(5));  // nothing numbered 5 was sent
  CHECK(first.closed_by_server());
  CHECK(fx.eventually([](const auto& s) { return !s.has_standby && s.standbys_attached == 1; }));
  StoreClient c = fx.client();
  c.set("k", "v");
  CHECK(c.get("k") == "v");
}

TEST_CASE("a client moves to the standby when the store's host is lost, and finds what it saw",
          "[replica][server]") {
  StoreWithStandby pair;
  ServerFixture& primary = pair.primary;
  ServerFixture& standby = pair.standby;
  StandbyFollower& follower = pair.follower;
  const std::string standby_endpoint = "127.0.0.1:" + std::to_string(standby.port());
  const StoreClientOptions o = pair.client_options();
  StoreClient c = StoreClient::connect("127.0.0.1", primary.port(), o);
  c.set("a", "1");
  CHECK(c.add("n", 5) == 5);
  c.queue_push("q", "x");
  CHECK(c.get("a") == "1");  // its reply came after the standby had all three
  // The standby serves nobody yet: a client of it alone is turned away.
  StoreClientOptions alone;
  alone.connect_timeout = std::chrono::milliseconds(500);
  CHECK_THROWS_WITH(StoreClient::connect("127.0.0.1", standby.port(), alone),
                    Catch::Contains("is a standby"));
  CHECK(follower.synced());
  CHECK_FALSE(follower.wait_lost(std::chrono::milliseconds(0)));

  primary.stop();  // the host is lost
  REQUIRE(follower.wait_lost(std::chrono::seconds(10)));
  CHECK_THAT(follower.why(), Catch::Contains("closed the stream"));
  standby.server().promote(follower.take());
  CHECK(c.get("a") == "1");  // the same client, now on the standby
  CHECK(c.endpoint() == standby_endpoint);
  CHECK(c.add("n", 1) == 6);
  CHECK(c.queue_pop("q") == "x");
  StoreClient late = StoreClient::connect("127.0.0.1", primary.port(), o);
  CHECK(late.get("a") == "1");
  CHECK(standby.server().serving());
}

TEST_CASE("a call that cannot be repeated says the store moved when its connection breaks",
          "[replica][server]") {
  ServerFixture primary;
  elasticrun::store::ServerOptions standby_options;
  standby_options.standby = true;
  ServerFixture standby(standby_options);
  StoreClientOptions o;
  o.connect_timeout = std::chrono::seconds(10);
  o.timeout = std::chrono::seconds(10);
  o.standbys = {{"127.0.0.1", standby.port()}};
  StoreClient c = StoreClient::connect("127.0.0.1", primary.port(), o);
  // A WAIT in flight when the host goes: repeated on the standby, which
  // then gets the key.
  auto waited = std::async(std::launch::async, [&] { return c.get("later"); });
  REQUIRE(primary.eventually([](const auto& s) { return s.requests >= 3; }));
  primary.stop();
  standby.server().promote({Change{Change::Kind::kPut, "/seen", "1"}});
  StoreClient other = StoreClient::connect("127.0.0.1", primary.port(), o);
  CHECK(other.get("seen") == "1");
  other.set("later", "2");
  CHECK(waited.get() == "2");
}

TEST_CASE("a standby that stops acknowledging is detached and the store serves on",
          "[replica][server]") {
  elasticrun::store::ServerOptions o;
  o.standby_ack_timeout = std::chrono::milliseconds(300);
  ServerFixture fx(o);
  RawConnection mute(fx.port());  // attaches, then never acknowledges (its host is gone)
  std::string f = frames::validate() + frames::ping(1);
  RequestWriter(f).type(QueryType::kReplicate).bytes("mute");
  mute.send(f);
  REQUIRE(mute.read_u32() == 1);
  StoreClient c = fx.client();
  CHECK(c.add("n", 1) == 1);  // held until the standby is given up on
  CHECK_FALSE(fx.stats().has_standby);
  CHECK(mute.closed_by_server());
  // After the standby went, writes are answered at once again.
  CHECK(c.add("n", 1) == 2);
}

TEST_CASE("with a standby, a SET returns once the standby has it, and APPEND sends only the bytes",
          "[replica][server]") {
  StoreWithStandby pair;
  ServerFixture& primary = pair.primary;
  ServerFixture& standby = pair.standby;
  StandbyFollower& follower = pair.follower;
  const StoreClientOptions o = pair.client_options();
  StoreClient c = StoreClient::connect("127.0.0.1", primary.port(), o);
  c.set("k", "v");
  const uint64_t before = follower.applied();
  CHECK(before >= 1);  // set() came back after the standby applied it
  c.append("log", std::string(1000, 'a'));
  c.append("log", "b");
  CHECK(follower.applied() == before + 2);
  primary.stop();
  REQUIRE(follower.wait_lost(std::chrono::seconds(10)));
  standby.server().promote(follower.take());
  CHECK(c.get("log") == std::string(1000, 'a') + "b");
  CHECK(c.get("k") == "v");
}
