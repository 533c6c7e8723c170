#include "store/state.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace elasticrun::store {

std::optional<int64_t> parse_counter(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  // from_chars takes '-' but not '+'; after a '+' no second sign is allowed.
  if (i < text.size() && text[i] == '+') {
    ++i;
    if (i < text.size() && text[i] == '-') return std::nullopt;
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
  if (ec != std::errc() || ptr == text.data() + i) return std::nullopt;
  return v;
}

const std::string* State::get(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

void State::set(const std::string& key, std::string value, Wakeups& woken) {
  kv_[key] = std::move(value);
  note_put(key);
  wake_all(key, woken);
}

std::string State::compare_set(const std::string& key, const std::string& expected,
                               std::string desired, Wakeups& woken) {
  std::string result;
  auto it = kv_.find(key);
  if (it == kv_.end()) {
    if (expected.empty()) {
      result = desired;
      kv_.emplace(key, std::move(desired));
      note_put(key);
    } else {
      // TCPStore answers an absent key with the caller's expected value; the
      // rendezvous code of torch.distributed.elastic relies on that.
      result = expected;
    }
  } else {
    if (it->second == expected) {
      it->second = std::move(desired);
      note_put(key);
    }
    result = it->second;
  }
  wake_all(key, woken);
  return result;
}

std::optional<int64_t> State::add(const std::string& key, int64_t delta, Wakeups& woken) {
  int64_t current = 0;
  auto it = kv_.find(key);
  if (it != kv_.end()) {
    auto parsed = parse_counter(it->second);
    if (!parsed) return std::nullopt;
    current = *parsed;
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) return std::nullopt;
  kv_[key] = std::to_string(sum);
  note_put(key);
  wake_all(key, woken);
  return sum;
}

void State::append(const std::string& key, const std::string& value, Wakeups& woken) {
  kv_[key].append(value);
  if (journal_) note(Change::Kind::kAppend, key, value);
  wake_all(key, woken);
}

bool State::erase(const std::string& key) {
  if (kv_.erase(key) == 0) return false;
  note(Change::Kind::kErase, key);
  return true;
}

std::vector<std::string> State::list_keys() const {
  std::vector<std::string> keys;
  keys.reserve(kv_.size());
  for (const auto& [k, v] : kv_) keys.push_back(k);
  return keys;
}

bool State::ready(const std::string& key) const {
  if (kv_.count(key)) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

bool State::all_ready(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return ready(k); });
}

bool State::wait(ClientId client, const std::vector<std::string>& keys) {
  cancel_wait(client);
  Wait w;
  for (const auto& key : keys) {
    if (ready(key)) continue;
    ++w.remaining;
    auto& list = waiters_[key];
    // A key named twice in one WAIT must arrive once, but counts twice.
    auto mine = std::find_if(list.begin(), list.end(), [&](auto& e) { return e.first == client; });
    if (mine != list.end()) {
      ++mine->second;
    } else {
      list.emplace_back(client, 1);
      w.keys.push_back(key);
    }
  }
  if (w.remaining == 0) return true;
  waits_.emplace(client, std::move(w));
  return false;
}

bool State::cancel_wait(ClientId client) {
  auto it = waits_.find(client);
  if (it == waits_.end()) return false;
  for (const auto& key : it->second.keys) {
    auto list = waiters_.find(key);
    if (list == waiters_.end()) continue;
    auto& v = list->second;
    v.erase(std::remove_if(v.begin(), v.end(), [&](auto& e) { return e.first == client; }),
            v.end());
    if (v.empty()) waiters_.erase(list);
  }
  waits_.erase(it);
  return true;
}

bool State::arrive(ClientId client, size_t count, const std::string& key) {
  auto it = waits_.find(client);
  if (it == waits_.end()) return false;
  Wait& w = it->second;
  auto k = std::find(w.keys.begin(), w.keys.end(), key);
  if (k != w.keys.end()) w.keys.erase(k);
  w.remaining -= std::min(count, w.remaining);
  if (w.remaining > 0) return false;
  waits_.erase(it);
  return true;
}

void State::wake_all(const std::string& key, Wakeups& woken) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second);
  waiters_.erase(it);
  for (auto [client, count] : list) {
    if (arrive(client, count, key)) woken.push_back(client);
  }
}

void State::wake_one(const std::string& key, Wakeups& woken) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& list = it->second;
  // One element releases at most one consumer, the earliest whose wait it
  // completes. Waiters passed over on the way also need other keys: for them
  // the queue counts as arrived, like any key, so they are released when
  // their other keys come (skipping them instead would leave them waiting
  // forever once the element is gone). If the element is taken by then, a
  // blocking queue_pop simply waits again.
  size_t i = 0;
  bool released = false;
  for (; i < list.size() && !released; ++i) {
    auto [client, count] = list[i];
    if (arrive(client, count, key)) {
      woken.push_back(client);
      released = true;
    }
  }
  list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i));
  if (list.empty()) waiters_.erase(it);
}

void State::queue_push(const std::string& key, std::string value, Wakeups& woken) {
  if (journal_) note(Change::Kind::kQueuePush, key, value);
  queues_[key].push_back(std::move(value));
  wake_one(key, woken);
}

std::pair<int64_t, std::string> State::queue_pop(const std::string& key) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return {0, {}};
  auto len = static_cast<int64_t>(it->second.size());
  std::string head = std::move(it->second.front());
  it->second.pop_front();
  note(Change::Kind::kQueuePop, key);
  // Unlike TCPStore, forget drained queues so that popping unique names
  // cannot grow memory forever.
  if (it->second.empty()) queues_.erase(it);
  return {len, std::move(head)};
}

int64_t State::queue_len(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

std::optional<bool> State::barrier(ClientId client, const std::string& key, int64_t world_size,
                                   Wakeups& woken) {
  int64_t count = 1;
  auto it = kv_.find(key);
  if (it != kv_.end()) {
    auto parsed = parse_counter(it->second);
    if (!parsed || *parsed == INT64_MAX) return std::nullopt;
    count = *parsed + 1;
  }
  kv_[key] = std::to_string(count);
  note_put(key);
  if (count >= world_size) {
    wake_all(key, woken);
    return true;
  }
  cancel_wait(client);
  waiters_[key].emplace_back(client, 1);
  waits_.emplace(client, Wait{1, {key}});
  return false;
}

void State::note(Change::Kind kind, const std::string& key, std::string value) {
  if (journal_) journal_->push_back(Change{kind, key, std::move(value)});
}

std::vector<Change> State::snapshot() const {
  std::vector<Change> out;
  out.reserve(kv_.size() + queues_.size());
  for (const auto& [k, v] : kv_) out.push_back(Change{Change::Kind::kPut, k, v});
  for (const auto& [k, q] : queues_) {
    for (const auto& v : q) out.push_back(Change{Change::Kind::kQueuePush, k, v});
  }
  return out;
}

void State::apply(const Change& c) {
  // Noted as any change, so a standby could pass them on in turn.
  switch (c.kind) {
    case Change::Kind::kPut:
      kv_[c.key] = c.value;
      note_put(c.key);
      break;
    case Change::Kind::kErase:
      (void)erase(c.key);
      break;
    case Change::Kind::kQueuePush:
      note(c.kind, c.key, c.value);
      queues_[c.key].push_back(c.value);
      break;
    case Change::Kind::kQueuePop:
      (void)queue_pop(c.key);
      break;
    case Change::Kind::kAppend:
      kv_[c.key].append(c.value);
      note(c.kind, c.key, c.value);
      break;
  }
}

}  // namespace elasticrun::store
