// The store's data: keys, queues and the clients waiting on them.
//
// Pure logic, no I/O: every operation that can release waiters appends the
// ids of the clients whose wait is now complete to `woken`; the server sends
// each of them STOP_WAITING. Semantics follow PyTorch's libuv TCPStore
// backend (docs/protocol.md lists them and the few places we differ).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace elasticrun::store {

using ClientId = uint64_t;
using Wakeups = std::vector<ClientId>;

// One change to the data, as a standby applies it (store/replica.hpp): the
// key's whole new value, its removal, a queue's new tail, a queue's pop,
// bytes appended to a key's value (APPEND: not the whole value again).
// Waits are a connection's, not data: they are not changes.
struct Change {
  enum class Kind : uint8_t { kPut = 1, kErase = 2, kQueuePush = 3, kQueuePop = 4, kAppend = 5 };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;  // kPut, kQueuePush, kAppend
  bool operator==(const Change&) const = default;
};

class State {
 public:
  // nullptr when absent.
  const std::string* get(const std::string& key) const;
  void set(const std::string& key, std::string value, Wakeups& woken);
  // See StoreClient::compare_set for the rule. Wakes waiters on key in every
  // case, as PyTorch does.
  std::string compare_set(const std::string& key, const std::string& expected, std::string desired,
                          Wakeups& woken);
  // nullopt when the current value is not a decimal integer or the sum overflows.
  std::optional<int64_t> add(const std::string& key, int64_t delta, Wakeups& woken);
  void append(const std::string& key, const std::string& value, Wakeups& woken);
  bool erase(const std::string& key);
  int64_t num_keys() const { return static_cast<int64_t>(kv_.size()); }
  std::vector<std::string> list_keys() const;

  // A key is ready when it exists, or names a non-empty queue.
  bool ready(const std::string& key) const;
  bool all_ready(const std::vector<std::string>& keys) const;

  // Registers client as waiting for every key not ready now; returns true
  // (and registers nothing) if all are ready. A client has at most one wait:
  // a new one replaces the old.
  bool wait(ClientId client, const std::vector<std::string>& keys);
  // Forgets the client's wait; true if it had one.
  bool cancel_wait(ClientId client);
  bool waiting(ClientId client) const { return waits_.count(client) != 0; }
  size_t waiter_count() const { return waits_.size(); }

  void queue_push(const std::string& key, std::string value, Wakeups& woken);
  // Length before the pop and the popped element (when length > 0).
  std::pair<int64_t, std::string> queue_pop(const std::string& key);
  int64_t queue_len(const std::string& key) const;

  // While set, every change to the data is appended to `journal` (which
  // must outlive it): what a primary sends its standby. Null stops it.
  void set_journal(std::vector<Change>* journal) { journal_ = journal; }
  // The data as changes that rebuild it in an empty State.
  std::vector<Change> snapshot() const;
  // A standby's: applies a change of its primary (no waiters to wake: a
  // standby serves no client).
  void apply(const Change& change);
  bool operator==(const State& other) const { return kv_ == other.kv_ && queues_ == other.queues_; }

  // Arrival at a barrier: the counter under key (decimal text) goes up by one.
  // Returns true when count >= world_size (earlier arrivals are woken);
  // otherwise the client now waits on key. nullopt if the key holds a non-integer.
  std::optional<bool> barrier(ClientId client, const std::string& key, int64_t world_size,
                              Wakeups& woken);

 private:
  struct Wait {
    size_t remaining = 0;
    std::vector<std::string> keys;  // distinct keys still awaited
  };

  // Releases every waiter on key.
  void wake_all(const std::string& key, Wakeups& woken);
  // Releases the first waiter (in arrival order) whose wait completes.
  void wake_one(const std::string& key, Wakeups& woken);
  // Marks one key of client's wait as arrived (with multiplicity count).
  bool arrive(ClientId client, size_t count, const std::string& key);
  // Journal entries (no-ops without a journal).
  void note(Change::Kind kind, const std::string& key, std::string value = {});
  void note_put(const std::string& key) {
    if (journal_) note(Change::Kind::kPut, key, kv_[key]);
  }

  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  // key -> clients waiting on it, in arrival order, with how many times the
  // key appears in that client's WAIT.
  std::unordered_map<std::string, std::vector<std::pair<ClientId, size_t>>> waiters_;
  std::unordered_map<ClientId, Wait> waits_;
  std::vector<Change>* journal_ = nullptr;
};

// Parses the decimal text TCPStore keeps for ADD and BARRIER counters, with
// C's strtoll rules (leading spaces and sign, trailing text ignored).
std::optional<int64_t> parse_counter(const std::string& text);

}  // namespace elasticrun::store
