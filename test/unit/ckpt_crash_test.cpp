// Crash safety of checkpoint publication, with a file system that forgets
// (leveldb's fault-injection Env): CrashingFileSystem records which names
// and which data were fsynced, and a save is cut off at every operation in
// turn. The machine then "restarts" keeping only what a crash may keep, and
// `latest` must name either the checkpoint from before the save or the new
// one, which must load and verify bit for bit; once save() has returned, only
// the new one. A save after the crash must then succeed and clean up.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/durable_file.hpp"
#include "elasticrun/checkpoint.hpp"
#include "elasticrun/errors.hpp"

namespace ckpt = elasticrun::ckpt;
namespace fs = std::filesystem;
namespace util = elasticrun::util;

namespace {

// Thrown at the simulated crash. Not an std::exception, so nothing in
// src/ckpt catches it: the save stops where it is, as the process would.
struct Crash {};

// What survives a crash of what was not synced. Synced names and data
// always do.
struct Survivors {
  std::string what;
  std::set<long> changes;  // unsynced name changes kept (ids), in their order
  bool data = false;       // unsynced file data kept
};

// An in-memory file system of inodes. Each directory has its names now and
// as of its last sync, and the changes between, each rename one atomic
// change; each file has its data now and as of its last fsync.
class CrashingFileSystem final : public ckpt::FileSystem {
 public:
  struct Node {
    bool dir = false;
    std::string data, synced_data;
    std::map<std::string, std::size_t> names, synced_names;

    static Node directory() {
      Node n;
      n.dir = true;
      return n;
    }
  };
  struct Change {  // in directory `dir`, `name` now names `node` (nullopt: nothing)
    long id;
    std::size_t dir;
    std::string name;
    std::optional<std::size_t> node;
    std::string what;  // "rename /a to /b", for messages
  };
  struct State {
    std::vector<Node> nodes{Node::directory()};  // [0] is "/"
    std::vector<Change> unsynced;
    long next_change = 0;
  };

  State snapshot() const {
    std::lock_guard lock(mu_);
    return state_;
  }
  void restore(const State& state) {
    std::lock_guard lock(mu_);
    state_ = state;
  }
  // The operation numbered `n` (0: the next one) that changes anything
  // crashes instead of happening; -1: none does.
  void crash_at(long n) {
    std::lock_guard lock(mu_);
    crash_at_ = n;
    ops_ = 0;
    crashed_ = false;
  }
  long ops() const {
    std::lock_guard lock(mu_);
    return ops_;
  }
  // What a crash now may keep: nothing unsynced, everything, and, since a
  // file system may write directory changes in any order until a sync
  // orders them, each unsynced name change alone and all but each one. Data
  // is lost or kept whole.
  std::vector<Survivors> crash_outcomes() const {
    std::lock_guard lock(mu_);
    std::set<long> all;
    std::map<long, std::string> what;
    for (const Change& c : state_.unsynced) {
      all.insert(c.id);
      what[c.id] = c.what;
    }
    std::vector<Survivors> out = {{"nothing unsynced", {}, false},
                                  {"all name changes, no unsynced data", all, false},
                                  {"unsynced data, no name change", {}, true},
                                  {"everything (SIGKILL)", all, true}};
    for (const auto& [id, text] : what) {
      std::set<long> others = all;
      others.erase(id);
      out.push_back({"only the name change '" + text + "'", {id}, false});
      out.push_back({"every name change but '" + text + "'", others, false});
    }
    return out;
  }
  // The machine comes back with what `keep` says; all of it is synced then.
  void restart(const Survivors& keep) {
    std::lock_guard lock(mu_);
    for (Node& n : state_.nodes) {
      n.names = n.synced_names;
      n.data = keep.data ? n.data : n.synced_data;
      n.synced_data = n.data;
    }
    for (const Change& c : state_.unsynced) {
      if (keep.changes.contains(c.id)) set_name(c.dir, c.name, c.node);
    }
    for (Node& n : state_.nodes) n.synced_names = n.names;
    state_.unsynced.clear();
    crash_at_ = -1;
    crashed_ = false;
  }
  // mkdir -p, durable at once: the test's fixture, not under test.
  void make_durable_dirs(const fs::path& path) {
    std::lock_guard lock(mu_);
    std::size_t at = 0;
    for (const auto& part : path.relative_path()) {
      auto& nodes = state_.nodes;
      if (auto it = nodes[at].names.find(part.string()); it != nodes[at].names.end()) {
        at = it->second;
        continue;
      }
      nodes.push_back(Node::directory());
      nodes[at].names[part.string()] = nodes.size() - 1;
      nodes[at].synced_names = nodes[at].names;
      at = nodes.size() - 1;
    }
  }
  std::vector<std::string> names_in(const fs::path& dir) const {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    if (auto at = find(dir)) {
      for (const auto& [name, node] : state_.nodes[*at].names) out.push_back(name);
    }
    return out;
  }

  util::Status write_file(const fs::path& path,
                          std::span<const std::span<const std::byte>> parts) override {
    std::lock_guard lock(mu_);
    step();
    auto [parent, leaf] = split(path);
    if (!parent) return {ENOENT, "open " + path.string()};
    auto at = find(path);
    if (at && node(*at).dir) return {EISDIR, "open " + path.string()};
    if (!at) {
      at = add(Node{});
      change({{*parent, leaf, at}}, "create " + path.string());
    }
    std::string data;
    for (const auto& part : parts) {
      data.append(reinterpret_cast<const char*>(part.data()), part.size());
    }
    node(*at).data = std::move(data);
    step();  // written, not yet fsynced
    node(*at).synced_data = node(*at).data;
    return {};
  }

  util::Status make_dir(const fs::path& path) override {
    std::lock_guard lock(mu_);
    step();
    auto [parent, leaf] = split(path);
    if (!parent) return {ENOENT, "create directory " + path.string()};
    if (find(path)) return {EEXIST, "create directory " + path.string()};
    change({{*parent, leaf, add(Node::directory())}}, "mkdir " + path.string());
    return {};
  }

  util::Status rename(const fs::path& from, const fs::path& to) override {
    std::lock_guard lock(mu_);
    step();
    auto [from_parent, from_leaf] = split(from);
    auto [to_parent, to_leaf] = split(to);
    const auto moving = find(from);
    if (!moving || !to_parent) return {ENOENT, "rename " + from.string()};
    if (const auto target = find(to)) {
      if (*target == *moving) return {};
      const Node& t = node(*target);
      if (t.dir && !node(*moving).dir) return {EISDIR, "rename " + from.string()};
      if (!t.dir && node(*moving).dir) return {ENOTDIR, "rename " + from.string()};
      if (t.dir && !t.names.empty()) return {ENOTEMPTY, "rename " + from.string()};
    }
    change({{*from_parent, from_leaf, std::nullopt}, {*to_parent, to_leaf, moving}},
           "rename " + from.string() + " to " + to.string());
    return {};
  }

  util::Status exchange(const fs::path& a, const fs::path& b) override {
    std::lock_guard lock(mu_);
    step();
    auto [a_parent, a_leaf] = split(a);
    auto [b_parent, b_leaf] = split(b);
    const auto na = find(a);
    const auto nb = find(b);
    if (!na || !nb) return {ENOENT, "exchange " + a.string()};
    change({{*a_parent, a_leaf, nb}, {*b_parent, b_leaf, na}},
           "exchange " + a.string() + " with " + b.string());
    return {};
  }

  util::Status remove_all(const fs::path& path) override {
    std::lock_guard lock(mu_);
    step();
    auto [parent, leaf] = split(path);
    if (const auto at = find(path)) {
      unlink_below(*at, path);
      change({{*parent, leaf, std::nullopt}}, "remove " + path.string());
    }
    return {};
  }

  util::Status sync_dir(const fs::path& dir) override {
    std::lock_guard lock(mu_);
    step();
    const auto at = find(dir);
    if (!at || !node(*at).dir) return {ENOENT, "open directory " + dir.string()};
    node(*at).synced_names = node(*at).names;
    std::erase_if(state_.unsynced, [&](const Change& c) { return c.dir == *at; });
    return {};
  }

  util::Result<ckpt::FileKind> kind(const fs::path& path) override {
    std::lock_guard lock(mu_);
    look();
    const auto at = find(path);
    if (!at) return ckpt::FileKind::kAbsent;
    return node(*at).dir ? ckpt::FileKind::kDirectory : ckpt::FileKind::kFile;
  }

  util::Result<std::vector<ckpt::DirEntry>> list(const fs::path& dir) override {
    std::lock_guard lock(mu_);
    look();
    const auto at = find(dir);
    if (!at || !node(*at).dir) return util::Status(ENOENT, "list " + dir.string());
    std::vector<ckpt::DirEntry> out;
    for (const auto& [name, child] : node(*at).names) out.push_back({name, node(child).dir});
    return out;
  }

  util::Result<std::vector<std::byte>> read_at(const fs::path& path, std::uint64_t offset,
                                               std::uint64_t size) override {
    std::lock_guard lock(mu_);
    look();
    const auto at = find(path);
    if (!at || node(*at).dir) return util::Status(ENOENT, "open " + path.string());
    const std::string& data = node(*at).data;
    if (offset + size > data.size()) return util::Status(EPROTO, "read " + path.string());
    const auto* p = reinterpret_cast<const std::byte*>(data.data()) + offset;
    return std::vector<std::byte>(p, p + size);
  }

  util::Result<std::string> read_text(const fs::path& path) override {
    std::lock_guard lock(mu_);
    look();
    const auto at = find(path);
    if (!at || node(*at).dir) return util::Status(ENOENT, "open " + path.string());
    return node(*at).data;
  }

 private:
  // Every operation that changes something is a point where the machine may
  // go down, before it happens.
  void step() {
    if (crashed_ || (crash_at_ >= 0 && ops_ == crash_at_)) {
      crashed_ = true;
      throw Crash{};
    }
    ++ops_;
  }
  void look() const {
    if (crashed_) throw Crash{};
  }

  Node& node(std::size_t at) { return state_.nodes[at]; }
  const Node& node(std::size_t at) const { return state_.nodes[at]; }
  std::size_t add(Node n) {
    state_.nodes.push_back(std::move(n));
    return state_.nodes.size() - 1;
  }
  void set_name(std::size_t dir, const std::string& name, std::optional<std::size_t> target) {
    if (target) {
      node(dir).names[name] = *target;
    } else {
      node(dir).names.erase(name);
    }
  }
  // One atomic change of names (a rename touches two), applied now and
  // remembered until its directory is synced.
  struct Name {
    std::size_t dir;
    std::string name;
    std::optional<std::size_t> node;
  };
  void change(const std::vector<Name>& names, const std::string& what) {
    const long id = state_.next_change++;
    for (const Name& n : names) {
      set_name(n.dir, n.name, n.node);
      state_.unsynced.push_back({id, n.dir, n.name, n.node, what});
    }
  }
  // Unlinks everything under directory `at`, one change per directory.
  void unlink_below(std::size_t at, const fs::path& path) {
    if (!node(at).dir) return;
    std::vector<Name> gone;
    for (const auto& [name, child] : std::map(node(at).names)) {
      unlink_below(child, path / name);
      gone.push_back({at, name, std::nullopt});
    }
    if (!gone.empty()) change(gone, "empty " + path.string());
  }

  std::optional<std::size_t> find(const fs::path& path) const {
    std::size_t at = 0;
    for (const auto& part : path.relative_path()) {
      if (part.empty()) continue;  // a trailing separator
      const auto it = node(at).names.find(part.string());
      if (!node(at).dir || it == node(at).names.end()) return std::nullopt;
      at = it->second;
    }
    return at;
  }
  // The directory holding `path`, if there is one, and the last name.
  std::pair<std::optional<std::size_t>, std::string> split(const fs::path& path) const {
    auto parent = find(path.parent_path());
    if (parent && !node(*parent).dir) parent.reset();
    return {parent, path.filename().string()};
  }

  mutable std::mutex mu_;
  State state_;
  long ops_ = 0;
  long crash_at_ = -1;
  bool crashed_ = false;
};

// A barrier that also runs the ranks one at a time, in rank order, so that
// the sequence of file operations (and so what "operation k" is) is the same
// on every run. Broken by a crash: every rank waiting then stops too.
class TurnBarrier {
 public:
  explicit TurnBarrier(int ranks) : ranks_(ranks) {}
  void wait_turn(int rank) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return broken_ || turn_ == rank; });
    if (broken_) throw Crash{};
  }
  void pass(int rank) {
    std::lock_guard lock(mu_);
    turn_ = (rank + 1) % ranks_;
    cv_.notify_all();
  }
  void arrive(int rank) {
    pass(rank);
    wait_turn(rank);
  }
  void brk() {
    std::lock_guard lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int ranks_;
  int turn_ = 0;
  bool broken_ = false;
};

// A version of a checkpoint: its step and a salt that changes every byte,
// so two saves of the same step are told apart.
struct Version {
  std::int64_t step = 0;
  int salt = 0;
  int world = 1;
};

struct Tensor {
  ckpt::TensorInfo info;
  std::vector<std::byte> bytes;
};

std::vector<Tensor> tensors_of(const Version& v) {
  std::vector<Tensor> out = {{{"w", "float32", 4, {5, 2}, false}, {}},
                             {{"b", "float32", 4, {2}, true}, {}}};
  for (std::size_t t = 0; t < out.size(); ++t) {
    auto& tensor = out[t];
    tensor.bytes.resize(static_cast<std::size_t>(tensor.info.rows()) * tensor.info.row_bytes());
    for (std::size_t i = 0; i < tensor.bytes.size(); ++i) {
      tensor.bytes[i] =
          static_cast<std::byte>(v.step * 31 + v.salt * 97 + static_cast<std::int64_t>(t * 13 + i));
    }
  }
  return out;
}

std::string extra_of(const Version& v) {
  return "{\"salt\":" + std::to_string(v.salt) + "}";
}

// Saves `v` through `disk` at v.world ranks (threads taking turns). True when
// the save returned on every rank; false when the file system crashed.
bool save(const fs::path& root, int keep, const Version& v) {
  const auto tensors = tensors_of(v);
  TurnBarrier turns(v.world);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(v.world));
  // One whole byte per rank: the ranks set theirs from their own threads
  // (vector<bool> would pack them into one shared word).
  std::vector<char> crashed(static_cast<std::size_t>(v.world), 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < v.world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        turns.wait_turn(r);
        std::vector<ckpt::ShardView> shards;
        for (const auto& t : tensors) {
          auto [begin, end] = t.info.replicated
                                  ? std::pair<std::int64_t, std::int64_t>{0, t.info.rows()}
                                  : ckpt::even_rows(t.info.rows(), r, v.world);
          const std::size_t row = t.info.row_bytes();
          shards.push_back(
              {t.info, begin, end,
               std::span(t.bytes).subspan(static_cast<std::size_t>(begin) * row,
                                          static_cast<std::size_t>(end - begin) * row)});
        }
        ckpt::Checkpointer c(root, keep, r, v.world, [&] { turns.arrive(r); });
        c.save(v.step, shards, extra_of(v));
        turns.pass(r);
      } catch (const Crash&) {
        crashed[static_cast<std::size_t>(r)] = 1;
        turns.brk();
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        turns.brk();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return std::find(crashed.begin(), crashed.end(), 1) == crashed.end();
}

// Which of `candidates` the checkpoint `latest` names is, reading and
// verifying all of it; nullopt for "no checkpoint". Throws (fails the test)
// when latest names something that is none of them, or does not load.
std::optional<std::size_t> loaded_version(const fs::path& root,
                                          const std::vector<Version>& candidates) {
  const auto dir = ckpt::latest(root);
  if (!dir) return std::nullopt;
  const ckpt::Reader reader(*dir);
  reader.verify();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Version& v = candidates[i];
    if (reader.step() != v.step || reader.extra_json() != extra_of(v) ||
        reader.world_size() != v.world) {
      continue;
    }
    for (const auto& t : tensors_of(v)) {
      const auto& info = reader.tensor(t.info.name);
      REQUIRE(info.shape == t.info.shape);
      std::vector<std::byte> got(t.bytes.size());
      reader.read_rows(t.info.name, 0, info.rows(), got);
      REQUIRE(got == t.bytes);  // the right step and salt, and not its bytes: corrupt
    }
    return i;
  }
  FAIL("latest names step " << reader.step() << " " << reader.extra_json()
                            << ", which is neither the checkpoint before the save nor the new one");
  return std::nullopt;
}

struct Scenario {
  const char* what;
  int keep;
  std::vector<Version> before;  // saved, uninterrupted, first
  Version next;                 // the save that crashes
};

void run(const Scenario& s) {
  CrashingFileSystem disk;
  const ckpt::ScopedFileSystem scoped(disk);
  const fs::path root = "/jobs/ckpt";
  disk.make_durable_dirs("/jobs");
  for (const Version& v : s.before) REQUIRE(save(root, s.keep, v));
  const auto start = disk.snapshot();
  std::vector<Version> candidates = {s.next};
  if (!s.before.empty()) candidates.push_back(s.before.back());

  disk.crash_at(-1);
  REQUIRE(save(root, s.keep, s.next));
  const long points = disk.ops();
  INFO(s.what << ": " << points << " points where the save can crash");

  int kept_new = 0, kept_old = 0;  // outcomes, so that both are known to be exercised
  for (long k = 0; k <= points; ++k) {
    disk.restore(start);
    disk.crash_at(k);
    const bool returned = save(root, s.keep, s.next);
    REQUIRE(returned == (k == points));
    const auto crashed = disk.snapshot();
    for (const Survivors& keep : disk.crash_outcomes()) {
      INFO("crash at operation " << k << ", keeping " << keep.what);
      disk.restore(crashed);
      disk.restart(keep);

      const auto got = loaded_version(root, candidates);
      if (returned) {
        REQUIRE(got == 0u);  // durable once save() returned
      } else if (s.before.empty()) {
        REQUIRE((!got || *got == 0));
      } else {
        REQUIRE(got.has_value());
      }
      ++(got == 0u ? kept_new : kept_old);

      // The job restarts and saves the same step again: that must work,
      // publish, and leave no .partial behind.
      const Version again{s.next.step, s.next.salt + 1000, s.next.world};
      REQUIRE(save(root, s.keep, again));
      REQUIRE(loaded_version(root, {again}) == 0u);
      for (const auto& name : disk.names_in(root)) {
        INFO(name);
        CHECK_FALSE(name.ends_with(".partial"));
      }
    }
  }
  CHECK(kept_new > 0);
  CHECK(kept_old > 0);
}

}  // namespace

TEST_CASE(
    "a crash at any point of the first save into a new directory leaves no checkpoint or "
    "the new one",
    "[ckpt][crash]") {
  run({"first save", 2, {}, {10, 1, 2}});
}

TEST_CASE("a crash at any point of a save leaves the previous checkpoint or the new one",
          "[ckpt][crash]") {
  run({"second save, three ranks", 2, {{10, 1, 2}}, {20, 2, 3}});
}

TEST_CASE("a crash while retention removes the previous checkpoint leaves the new one loadable",
          "[ckpt][crash]") {
  run({"keep 1", 1, {{10, 1, 1}, {20, 2, 2}}, {30, 3, 2}});
}

TEST_CASE("a crash while the same step is saved again leaves one whole version of it",
          "[ckpt][crash]") {
  // A restart repeated step 20 at another world size; `latest` names it
  // throughout, so the exchange must never expose a mix of the two.
  run({"same step again", 2, {{10, 1, 2}, {20, 2, 3}}, {20, 3, 2}});
}
