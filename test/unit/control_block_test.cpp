// The per-node control block (control/control_block): file format checks,
// the agent's and the workers' updates, and the seqlocks under concurrency.
#include "control/control_block.hpp"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "control/assignment.hpp"

using namespace elasticrun::control;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "control_block_test.XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

ControlBlock create_ok(const std::string& path, int slots) {
  auto r = ControlBlock::create(path, slots);
  INFO((r ? std::string() : r.status().message()));
  REQUIRE(r);
  return std::move(r).value();
}

ControlBlock open_ok(const std::string& path) {
  auto r = ControlBlock::open(path);
  INFO((r ? std::string() : r.status().message()));
  REQUIRE(r);
  return std::move(r).value();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// The message open() gives for a file made from a valid block by edit.
template <typename Edit>
std::string open_error_after(const TempDir& dir, Edit edit) {
  const std::string good = dir.file("good");
  fs::remove(good);  // from an earlier call in the same test
  { create_ok(good, 4); }
  std::string bytes = read_bytes(good);
  edit(bytes);
  const std::string bad = dir.file("bad");
  write_bytes(bad, bytes);
  auto r = ControlBlock::open(bad);
  REQUIRE_FALSE(r);
  CHECK(r.status().err() == EINVAL);
  CHECK(r.status().message().find(bad) != std::string::npos);
  return r.status().message();
}

ControlBlock::Event scale_down_event() {
  ControlBlock::Event e;
  e.generation = 3;
  e.stop_step = 1200;
  e.kind = EventKind::scale_down;
  e.next_world_size = 12;
  e.deadline_unix_ms = 1'700'000'000'123;
  e.reason = "node-7 is being drained";
  return e;
}

}  // namespace

TEST_CASE("a created block opens elsewhere with the agent's event and empty slots", "[control]") {
  TempDir dir;
  const std::string path = dir.file("cb");
  ControlBlock agent = create_ok(path, 4);
  CHECK(fs::file_size(path) == 256 + 4 * 64);
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));

  ControlBlock worker = open_ok(path);
  CHECK(worker.num_slots() == 4);
  CHECK(worker.path() == path);

  auto fresh = worker.read_event();
  CHECK(fresh.generation == 0);
  CHECK(fresh.event_seq == 0);
  CHECK(fresh.stop_step == -1);
  CHECK(fresh.kind == EventKind::none);
  CHECK(fresh.next_world_size == -1);
  CHECK(fresh.deadline_unix_ms == 0);
  CHECK(fresh.reason.empty());
  for (int i = 0; i < 4; ++i) {
    auto s = worker.read_slot(i);
    CHECK(s.step == -1);
    CHECK(std::isnan(s.loss));
    CHECK(std::isnan(s.tokens_per_s));
    CHECK(s.flags == 0);
    CHECK(s.pid == 0);
  }
  CHECK(worker.max_step() == -1);
  CHECK_FALSE(worker.any_attached());

  CHECK(agent.publish_event(scale_down_event()) == 1);
  auto e = worker.read_event();
  CHECK(e.generation == 3);
  CHECK(e.event_seq == 1);
  CHECK(e.stop_step == 1200);
  CHECK(e.kind == EventKind::scale_down);
  CHECK(e.next_world_size == 12);
  CHECK(e.deadline_unix_ms == 1'700'000'000'123u);
  CHECK(e.reason == "node-7 is being drained");
  CHECK(std::string(to_string(e.kind)) == "scale_down");

  CHECK(agent.publish_event(scale_down_event()) == 2);
  CHECK(worker.read_event().event_seq == 2);
}

TEST_CASE("the bytes on disk are at the offsets docs/protocol.md gives", "[control]") {
  TempDir dir;
  const std::string path = dir.file("cb");
  ControlBlock agent = create_ok(path, 2);
  agent.publish_event(scale_down_event());
  ControlBlock::SlotView v;
  v.step = 77;
  v.timestamp_ns = 123456789;
  v.loss = 2.5;
  v.tokens_per_s = 1000.0;
  v.flags = kFlagAttached | kFlagSaved;
  v.pid = 4242;
  agent.write_slot(1, v);

  const std::string b = read_bytes(path);
  auto u32 = [&](size_t off) {
    uint32_t x;
    std::memcpy(&x, b.data() + off, 4);
    return x;
  };
  auto u64 = [&](size_t off) {
    uint64_t x;
    std::memcpy(&x, b.data() + off, 8);
    return x;
  };
  auto f64 = [&](size_t off) {
    double x;
    std::memcpy(&x, b.data() + off, 8);
    return x;
  };
  CHECK(b.substr(0, 4) == "ERCB");
  CHECK(u32(0) == 0x42435245u);
  CHECK(u32(4) == 1);
  CHECK(u32(8) == 256);
  CHECK(u32(12) == 64);
  CHECK(u32(16) == 2);
  CHECK(u64(24) % 2 == 0);
  CHECK(u64(32) == 3);
  CHECK(u64(40) == 1);
  CHECK(static_cast<int64_t>(u64(48)) == 1200);
  CHECK(u32(56) == 2);
  CHECK(static_cast<int32_t>(u32(60)) == 12);
  CHECK(u64(64) == 1'700'000'000'123u);
  CHECK(std::string(b.data() + 72) == "node-7 is being drained");
  const size_t s1 = 256 + 64;
  CHECK(u64(s1) % 2 == 0);
  CHECK(static_cast<int64_t>(u64(s1 + 8)) == 77);
  CHECK(u64(s1 + 16) == 123456789u);
  CHECK(f64(s1 + 24) == 2.5);
  CHECK(f64(s1 + 32) == 1000.0);
  CHECK(u32(s1 + 40) == (kFlagAttached | kFlagSaved));
  CHECK(u32(s1 + 44) == 4242);
}

TEST_CASE("create refuses a path that already exists and leaves that file alone", "[control]") {
  TempDir dir;
  const std::string path = dir.file("cb");
  write_bytes(path, "somebody else's file");
  auto r = ControlBlock::create(path, 2);
  REQUIRE_FALSE(r);
  CHECK(r.status().err() == EEXIST);
  CHECK(r.status().message().find(path) != std::string::npos);
  CHECK(read_bytes(path) == "somebody else's file");

  // And a block the agent made is not silently reused either.
  const std::string block = dir.file("block");
  { create_ok(block, 1); }
  CHECK_FALSE(ControlBlock::create(block, 1));
}

TEST_CASE("create refuses slot counts outside 1..kMaxSlots without making a file", "[control]") {
  TempDir dir;
  for (int n : {0, -1, kMaxSlots + 1}) {
    auto r = ControlBlock::create(dir.file("cb"), n);
    REQUIRE_FALSE(r);
    CHECK(r.status().err() == EINVAL);
    CHECK_FALSE(fs::exists(dir.file("cb")));
  }
}

TEST_CASE("open rejects a file with a bad magic", "[control]") {
  TempDir dir;
  auto msg = open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 0, 0x12345678); });
  CHECK(msg.find("magic") != std::string::npos);
}

TEST_CASE("open rejects another version", "[control]") {
  TempDir dir;
  auto msg = open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 4, 2); });
  CHECK(msg.find("version 2") != std::string::npos);
}

TEST_CASE("open rejects header or slot sizes other than version 1's", "[control]") {
  TempDir dir;
  open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 8, 512); });
  open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 12, 128); });
}

TEST_CASE("open rejects a file cut inside the header", "[control]") {
  TempDir dir;
  for (size_t keep : {size_t{0}, size_t{4}, size_t{255}}) {
    auto msg = open_error_after(dir, [&](std::string& b) { b.resize(keep); });
    CHECK(msg.find("shorter than") != std::string::npos);
  }
}

TEST_CASE("open rejects a file that does not hold every slot it announces", "[control]") {
  TempDir dir;
  // Truncated inside the last slot.
  auto msg = open_error_after(dir, [](std::string& b) { b.resize(b.size() - 1); });
  CHECK(msg.find("too short for 4 slots") != std::string::npos);
  // A header announcing more slots than the file has.
  msg = open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 16, 5); });
  CHECK(msg.find("too short for 5 slots") != std::string::npos);
  // Zero slots, and a count past the cap (which would map gigabytes).
  open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 16, 0); });
  open_error_after(dir, [](std::string& b) { poke<uint32_t>(b, 16, 0xFFFFFFFF); });
}

TEST_CASE("open of a missing file or a directory is an error naming the path", "[control]") {
  TempDir dir;
  auto missing = ControlBlock::open(dir.file("nothing"));
  REQUIRE_FALSE(missing);
  CHECK(missing.status().err() == ENOENT);
  CHECK(missing.status().message().find(dir.file("nothing")) != std::string::npos);

  fs::create_directory(dir.file("d"));
  CHECK_FALSE(ControlBlock::open(dir.file("d")));
}

TEST_CASE("a reason longer than the field is cut at a UTF-8 boundary", "[control]") {
  TempDir dir;
  ControlBlock agent = create_ok(dir.file("cb"), 1);
  ControlBlock::Event e;
  // 126 ASCII bytes, then a 3-byte character: it does not fit in 127 bytes
  // and must go whole, not leave one or two of its bytes behind.
  e.reason = std::string(126, 'x') + "\xE2\x82\xAC" + "tail";
  agent.publish_event(e);
  CHECK(agent.read_event().reason == std::string(126, 'x'));

  e.reason = std::string(300, 'y');
  agent.publish_event(e);
  CHECK(agent.read_event().reason == std::string(127, 'y'));
}

TEST_CASE("set_stop_step changes the stop step and nothing else", "[control]") {
  TempDir dir;
  ControlBlock agent = create_ok(dir.file("cb"), 1);
  auto e = scale_down_event();
  e.stop_step = -1;
  agent.publish_event(e);
  agent.set_stop_step(4321);
  auto got = agent.read_event();
  CHECK(got.stop_step == 4321);
  CHECK(got.event_seq == 1);
  CHECK(got.kind == EventKind::scale_down);
  CHECK(got.reason == e.reason);
}

TEST_CASE("slots are independent of each other and of the header", "[control]") {
  TempDir dir;
  ControlBlock agent = create_ok(dir.file("cb"), 3);
  ControlBlock worker1 = open_ok(dir.file("cb"));
  agent.publish_event(scale_down_event());

  ControlBlock::SlotView v;
  v.step = 10;
  v.timestamp_ns = 99;
  v.loss = 0.75;
  v.tokens_per_s = 5e5;
  v.flags = kFlagAttached;
  v.pid = 1234;
  worker1.write_slot(1, v);

  auto s1 = agent.read_slot(1);
  CHECK(s1.step == 10);
  CHECK(s1.timestamp_ns == 99);
  CHECK(s1.loss == 0.75);
  CHECK(s1.tokens_per_s == 5e5);
  CHECK(s1.flags == kFlagAttached);
  CHECK(s1.pid == 1234);
  for (int other : {0, 2}) {
    CHECK(agent.read_slot(other).step == -1);
    CHECK(agent.read_slot(other).flags == 0);
    CHECK_FALSE(agent.attached(other));
  }
  CHECK(agent.attached(1));
  CHECK(agent.any_attached());
  CHECK(agent.read_event().reason == "node-7 is being drained");
}

TEST_CASE("max_step is the highest step any slot published", "[control]") {
  TempDir dir;
  ControlBlock cb = create_ok(dir.file("cb"), 4);
  CHECK(cb.max_step() == -1);
  ControlBlock::SlotView v;
  v.step = 7;
  cb.write_slot(2, v);
  CHECK(cb.max_step() == 7);
  v.step = 9;
  cb.write_slot(0, v);
  v.step = 8;
  cb.write_slot(3, v);
  CHECK(cb.max_step() == 9);
}

TEST_CASE("reset starts a new generation: no event, empty slots, event_seq kept", "[control]") {
  TempDir dir;
  ControlBlock cb = create_ok(dir.file("cb"), 2);
  cb.publish_event(scale_down_event());
  ControlBlock::SlotView v;
  v.step = 50;
  v.loss = 1.0;
  v.flags = kFlagAttached | kFlagStopped | kFlagSaved;
  v.pid = 77;
  cb.write_slot(0, v);
  cb.write_slot(1, v);

  cb.reset(4);
  auto e = cb.read_event();
  CHECK(e.generation == 4);
  CHECK(e.event_seq == 1);
  CHECK(e.kind == EventKind::none);
  CHECK(e.stop_step == -1);
  CHECK(e.next_world_size == -1);
  CHECK(e.deadline_unix_ms == 0);
  CHECK(e.reason.empty());
  for (int i = 0; i < 2; ++i) {
    auto s = cb.read_slot(i);
    CHECK(s.step == -1);
    CHECK(std::isnan(s.loss));
    CHECK(s.flags == 0);
    CHECK(s.pid == 0);
  }
  CHECK(cb.max_step() == -1);
  CHECK_FALSE(cb.any_attached());
  CHECK(cb.publish_event(scale_down_event()) == 2);
}

TEST_CASE("unlink removes the file and the mapping stays usable", "[control]") {
  TempDir dir;
  ControlBlock cb = create_ok(dir.file("cb"), 1);
  // --inprocess-restart's next assignment, beside the block: it goes too.
  REQUIRE(elasticrun::control::write_assignment(
      elasticrun::control::assignment_path(dir.file("cb")), 2, {{}}));
  REQUIRE(cb.unlink());
  CHECK_FALSE(fs::exists(dir.file("cb")));
  CHECK_FALSE(fs::exists(dir.file("cb") + ".assign"));
  cb.publish_event(scale_down_event());
  CHECK(cb.read_event().generation == 3);
  auto again = cb.unlink();
  REQUIRE_FALSE(again);
  CHECK(again.err() == ENOENT);
}

TEST_CASE("a moved-from block leaves the mapping to the new owner", "[control]") {
  TempDir dir;
  ControlBlock a = create_ok(dir.file("cb"), 2);
  ControlBlock b = std::move(a);
  b.publish_event(scale_down_event());
  ControlBlock c = create_ok(dir.file("other"), 1);
  c = std::move(b);
  CHECK(c.num_slots() == 2);
  CHECK(c.path() == dir.file("cb"));
  CHECK(c.read_event().generation == 3);
}

TEST_CASE("a slot left odd by a writer that died mid-update is read, then repaired", "[control]") {
  TempDir dir;
  const std::string path = dir.file("cb");
  { create_ok(path, 1); }
  // Simulate the dead writer: make slot 0's seqlock odd on disk.
  {
    std::string b = read_bytes(path);
    poke<uint64_t>(b, 256, 7);
    poke<int64_t>(b, 256 + 8, 31);
    write_bytes(path, b);
  }
  ControlBlock cb = open_ok(path);
  cb.set_stuck_writer_timeout(std::chrono::milliseconds(1));
  CHECK(cb.read_slot(0).step == 31);  // returns instead of spinning forever
  ControlBlock::SlotView v;
  v.step = 32;
  cb.write_slot(0, v);
  CHECK(cb.read_slot(0).step == 32);
  const std::string b = read_bytes(path);
  uint64_t seq;
  std::memcpy(&seq, b.data() + 256, 8);
  CHECK(seq == 8);
}

// Run under ThreadSanitizer by scripts/test.sh: every shared access is atomic,
// so TSan must stay quiet, and no snapshot may mix two updates.
TEST_CASE("concurrent readers never see a torn event or slot", "[control]") {
  TempDir dir;
  const std::string path = dir.file("cb");
  ControlBlock agent = create_ok(path, 2);
  ControlBlock worker = open_ok(path);
  ControlBlock reader = open_ok(path);

  // Every field of update n is derived from n, so a mixed snapshot shows.
  auto event_for = [](uint64_t n) {
    ControlBlock::Event e;
    e.generation = n;
    e.stop_step = static_cast<int64_t>(n) * 3;
    e.kind = static_cast<EventKind>(1 + n % 5);
    e.next_world_size = static_cast<int32_t>(n % 1000);
    e.deadline_unix_ms = n * 7;
    e.reason = "update " + std::to_string(n) + std::string(n % 100, '.');
    return e;
  };
  auto slot_for = [](uint64_t n) {
    ControlBlock::SlotView v;
    v.step = static_cast<int64_t>(n);
    v.timestamp_ns = n * 11;
    v.loss = static_cast<double>(n) / 4;
    v.tokens_per_s = static_cast<double>(n) * 2;
    v.flags = static_cast<uint32_t>(n & 7);
    v.pid = static_cast<uint32_t>(n * 13);
    return v;
  };

  constexpr uint64_t kUpdates = 20000;
  std::atomic<bool> done{false};
  std::thread agent_thread([&] {
    for (uint64_t n = 1; n <= kUpdates; ++n) agent.publish_event(event_for(n));
  });
  std::thread worker_thread([&] {
    for (uint64_t n = 1; n <= kUpdates; ++n) worker.write_slot(1, slot_for(n));
  });

  uint64_t torn = 0, reads = 0, last_seq = 0, backwards = 0;
  std::thread checker([&] {
    while (!done.load(std::memory_order_acquire)) {
      auto e = reader.read_event();
      ++reads;
      if (e.event_seq != 0) {
        auto want = event_for(e.generation);
        if (e.event_seq != e.generation || e.stop_step != want.stop_step || e.kind != want.kind ||
            e.next_world_size != want.next_world_size ||
            e.deadline_unix_ms != want.deadline_unix_ms || e.reason != want.reason) {
          ++torn;
        }
        if (e.event_seq < last_seq) ++backwards;
        last_seq = e.event_seq;
      }
      auto s = reader.read_slot(1);
      if (s.step != -1) {
        auto want = slot_for(static_cast<uint64_t>(s.step));
        if (s.timestamp_ns != want.timestamp_ns || s.loss != want.loss ||
            s.tokens_per_s != want.tokens_per_s || s.flags != want.flags || s.pid != want.pid) {
          ++torn;
        }
      }
    }
  });
  agent_thread.join();
  worker_thread.join();
  done.store(true, std::memory_order_release);
  checker.join();

  CHECK(reads > 0);
  CHECK(torn == 0);
  CHECK(backwards == 0);
  CHECK(reader.read_event().event_seq == kUpdates);
  CHECK(reader.read_slot(1).step == static_cast<int64_t>(kUpdates));
}
