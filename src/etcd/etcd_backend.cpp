#include "etcd/etcd_backend.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "util/strings.hpp"

namespace elasticrun::etcd {
namespace {

using Clock = std::chrono::steady_clock;
using util::Deadline;
using util::quote;

// What a counter's key holds: this prefix and a base. etcd raises a key's
// version by one at each put, so the count is version - 1 + base: a counter
// made by its first increment has base 1, one made by ADD 0 (which creates
// the key, as on a TCPStore) base 0. No value the rendezvous writes starts
// with a control character.
constexpr std::string_view kCounter = "\x01elasticrun-counter:";

std::string counter_value(int64_t base) {
  return std::string(kCounter) + std::to_string(base);
}

bool is_counter(const std::string& value) {
  return value.compare(0, kCounter.size(), kCounter) == 0;
}

int64_t count_of(const KeyValue& kv) {
  return kv.version - 1 + std::stoll(kv.value.substr(kCounter.size()));
}

// Operations per transaction: etcd's --max-txn-ops defaults to 128.
constexpr size_t kMaxTxnOps = 128;
// Bytes per transaction, below etcd's default request limit of 1.5 MiB.
constexpr size_t kMaxTxnBytes = 1 << 20;

// A key's value as a TCPStore client would read it.
std::string shown(const KeyValue& kv) {
  return is_counter(kv.value) ? std::to_string(count_of(kv)) : kv.value;
}

std::optional<KeyValue> first_kv(const TxnReply& t, size_t i) {
  const auto& r = std::get<RangeReply>(t.responses.at(i));
  if (r.kvs.empty()) return std::nullopt;
  return r.kvs.front();
}

int64_t parse_count(const std::string& text, const std::string& key) {
  try {
    size_t used = 0;
    const int64_t v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw StoreError("etcd: add " + quote(key) + ": the key holds " + quote(text) +
                   ", not a decimal");
}

// Splits n operations into transactions within etcd's limits.
template <typename SizeOf>
std::vector<std::pair<size_t, size_t>> chunks(size_t n, SizeOf size_of) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0, bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t b = size_of(i);
    if (i > begin && (i - begin == kMaxTxnOps || bytes + b > kMaxTxnBytes)) {
      out.emplace_back(begin, i);
      begin = i;
      bytes = 0;
    }
    bytes += b;
  }
  if (n > begin) out.emplace_back(begin, n);
  return out;
}

}  // namespace

struct EtcdBackend::Read {
  std::vector<std::optional<KeyValue>> kvs;  // one per key, in order
  size_t missing = 0;                        // how many keys do not exist
  size_t first_missing = 0;                  // the index of the first
  int64_t missing_revision = 0;              // the revision it was found missing at
};

StoreClient connect(const EtcdOptions& etcd, StoreClientOptions options) {
  auto backend = std::make_unique<EtcdBackend>(Gateway(etcd), options);
  backend->ping(options.connect_timeout);
  return StoreClient(std::move(backend));
}

EtcdBackend::EtcdBackend(Gateway gateway, StoreClientOptions options)
    : gateway_(std::move(gateway)), options_(std::move(options)) {}

Deadline EtcdBackend::deadline(Duration timeout) const {
  return Deadline::after(timeout == StoreClient::kDefault ? options_.timeout : timeout);
}

std::string EtcdBackend::wire_key(std::string_view key) const {
  return options_.key_prefix + std::string(key);
}

EtcdBackend::Read EtcdBackend::read(const std::vector<std::string>& keys, Deadline dl,
                                    const std::string& what) {
  Read r;
  r.kvs.reserve(keys.size());
  for (const auto& [begin, end] :
       chunks(keys.size(), [&](size_t i) { return keys[i].size() + 64; })) {
    std::vector<Op> ops;
    for (size_t i = begin; i < end; ++i) ops.emplace_back(Range{wire_key(keys[i])});
    const TxnReply t =
        parse_txn(gateway_.call("/v3/kv/txn", txn_request({}, ops, {}), dl, true, what));
    if (t.responses.size() != ops.size()) {
      throw StoreError("etcd " + endpoint() + ": " + what + ": " +
                       std::to_string(t.responses.size()) + " answers to " +
                       std::to_string(ops.size()) + " reads");
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      r.kvs.push_back(first_kv(t, i));
      if (!r.kvs.back()) {
        if (r.missing++ == 0) {
          r.first_missing = begin + i;
          r.missing_revision = t.revision;
        }
      }
    }
  }
  return r;
}

EtcdBackend::Read EtcdBackend::read_all(const std::vector<std::string>& keys, Deadline dl,
                                        const std::string& what) {
  // A watch left open by an earlier wait for this key saw no write since
  // the read that started it: wait on it before reading anything.
  if (keys.size() == 1 && gateway_.watching(wire_key(keys[0]))) {
    if (gateway_.watch_for_put(wire_key(keys[0]), 0, dl) == Gateway::WatchEnd::kTimeout) {
      throw TimeoutError("etcd " + endpoint() + ": " + what + ": timed out waiting for " +
                         quote(keys[0]));
    }
  }
  for (;;) {
    Read r = read(keys, dl, what);
    if (r.missing == 0) return r;
    // Written after that read, or about to be: the watch starts right
    // after the revision the key was found missing at, so nothing between
    // the two is missed.
    const auto end =
        gateway_.watch_for_put(wire_key(keys[r.first_missing]), r.missing_revision + 1, dl);
    if (end == Gateway::WatchEnd::kTimeout) {
      throw TimeoutError("etcd " + endpoint() + ": " + what + ": timed out waiting for " +
                         quote(keys[r.first_missing]));
    }
  }
}

int64_t EtcdBackend::lease(Deadline dl) {
  const auto ttl = options_.key_ttl;
  const auto now = Clock::now();
  if (lease_id_ != 0 && now - lease_renewed_ < ttl / 3) return lease_id_;
  if (lease_id_ != 0) {
    const LeaseReply k = parse_lease(gateway_.call(
        "/v3/lease/keepalive", lease_keepalive_request(lease_id_), dl, true, "lease keepalive"));
    if (k.ttl_s > 0) {
      lease_renewed_ = now;
      return lease_id_;
    }
  }
  // etcd rounds a lease below its minimum (about 2 s) up to it.
  const int64_t ttl_s = std::max<int64_t>(2, (ttl.count() + 999) / 1000);
  lease_id_ = parse_lease(gateway_.call("/v3/lease/grant", lease_grant_request(ttl_s), dl, true,
                                        "lease grant"))
                  .id;
  lease_renewed_ = now;
  return lease_id_;
}

// Puts carry the client's lease when it has key_ttl; a lease that expired
// while the client was stopped (an agent SIGSTOPped past it) is granted
// again, once.
Json EtcdBackend::write(const std::function<Json(int64_t lease)>& txn, Deadline dl,
                        const std::string& what) {
  const bool leased = options_.key_ttl.count() > 0;
  try {
    return gateway_.call("/v3/kv/txn", txn(leased ? lease(dl) : 0), dl, true, what);
  } catch (const StoreError& e) {
    if (!leased || std::string_view(e.what()).find("lease not found") == std::string_view::npos) {
      throw;
    }
  }
  lease_id_ = 0;
  return gateway_.call("/v3/kv/txn", txn(lease(dl)), dl, true, what);
}

void EtcdBackend::set(std::string_view key, std::string_view value, Duration timeout) {
  multi_set({std::string(key)}, {std::string(value)}, timeout);
}

std::string EtcdBackend::get(std::string_view key, Duration timeout) {
  const std::vector<std::string> keys{std::string(key)};
  return shown(*read_all(keys, deadline(timeout), "get " + quote(key)).kvs[0]);
}

std::string EtcdBackend::get_present(std::string_view key, Duration timeout) {
  const auto r = read({std::string(key)}, deadline(timeout), "get " + quote(key));
  return r.kvs[0] ? shown(*r.kvs[0]) : std::string();
}

std::optional<int64_t> EtcdBackend::increment(const std::string& key, Deadline dl,
                                              const std::string& what) {
  std::string now = counter_value(1);  // the usual counter, until a read says otherwise
  for (;;) {
    // A compare on the value, not on a revision: increments never conflict
    // with each other, however many agents add at once.
    const TxnReply up = parse_txn(gateway_.call(
        "/v3/kv/txn",
        txn_request({Compare{Compare::Target::kValue, Compare::Result::kEqual, key, 0, now}},
                    {Put{key, now, 0, true}}, {Range{key}}),
        dl, false, what));
    if (up.succeeded) {
      const auto& p = std::get<PutReply>(up.responses.at(0));
      KeyValue after = p.prev_kv.value_or(KeyValue{});
      after.value = now;
      ++after.version;
      return count_of(after);
    }
    if (const auto kv = first_kv(up, 0)) {
      if (!is_counter(kv->value)) return std::nullopt;  // a decimal SET: swap
      now = kv->value;
      continue;
    }
    if (create(key, counter_value(1), dl, what)) return 1;
  }
}

bool EtcdBackend::create(const std::string& key, const std::string& value, Deadline dl,
                         const std::string& what) {
  return parse_txn(gateway_.call("/v3/kv/txn",
                                 txn_request({Compare{Compare::Target::kCreate,
                                                      Compare::Result::kEqual, key, 0}},
                                             {Put{key, value}}, {}),
                                 dl, false, what))
      .succeeded;
}

int64_t EtcdBackend::add_by_swap(const std::string& key, int64_t delta, Deadline dl,
                                 const std::string& what) {
  for (;;) {
    const TxnReply cur =
        parse_txn(gateway_.call("/v3/kv/txn", txn_request({}, {Range{key}}, {}), dl, true, what));
    const std::optional<KeyValue> kv = first_kv(cur, 0);
    const int64_t now = kv ? parse_count(shown(*kv), key) : 0;
    const Compare unchanged =
        kv ? Compare{Compare::Target::kMod, Compare::Result::kEqual, key, kv->mod_revision, {}}
           : Compare{Compare::Target::kCreate, Compare::Result::kEqual, key, 0, {}};
    const TxnReply t = parse_txn(gateway_.call(
        "/v3/kv/txn", txn_request({unchanged}, {Put{key, std::to_string(now + delta)}}, {}), dl,
        false, what));
    if (t.succeeded) return now + delta;
  }
}

int64_t EtcdBackend::add(std::string_view key, int64_t delta, Duration timeout) {
  const std::string what = "add " + quote(key);
  const Deadline dl = deadline(timeout);
  const std::string k = wire_key(key);
  if (delta == 0) {
    // Creates the key, as a TCPStore's ADD does.
    for (;;) {
      const auto r = read({std::string(key)}, dl, what);
      if (r.kvs[0]) return parse_count(shown(*r.kvs[0]), std::string(key));
      if (create(k, counter_value(0), dl, what)) return 0;
    }
  }
  if (delta < 0) return add_by_swap(k, delta, dl, what);
  int64_t now = 0;
  for (int64_t i = 0; i < delta; ++i) {
    const auto n = increment(k, dl, what);
    if (!n) return add_by_swap(k, delta - i, dl, what);
    now = *n;
  }
  return now;
}

std::string EtcdBackend::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired, Duration timeout) {
  const std::string what = "compare_set " + quote(key);
  const Deadline dl = deadline(timeout);
  const std::string k = wire_key(key);
  // TCPStore's rule: an empty `expected` matches an absent key, and a
  // present key whose value is empty.
  std::vector<Compare> when{
      expected.empty()
          ? Compare{Compare::Target::kCreate, Compare::Result::kEqual, k, 0, {}}
          : Compare{Compare::Target::kValue, Compare::Result::kEqual, k, 0, std::string(expected)}};
  for (int pass = 0;; ++pass) {
    const TxnReply t = parse_txn(
        gateway_.call("/v3/kv/txn", txn_request(when, {Put{k, std::string(desired)}}, {Range{k}}),
                      dl, true, what));
    if (t.succeeded) return std::string(desired);
    const auto kv = first_kv(t, 0);
    if (!kv) return std::string(expected);
    if (expected.empty() && kv->value.empty() && pass == 0) {
      when = {Compare{Compare::Target::kValue, Compare::Result::kEqual, k, 0, {}}};
      continue;
    }
    return shown(*kv);
  }
}

bool EtcdBackend::check(const std::vector<std::string>& keys, Duration timeout) {
  return read(keys, deadline(timeout), "check " + store::describe_keys(keys)).missing == 0;
}

void EtcdBackend::wait(const std::vector<std::string>& keys, Duration timeout) {
  (void)read_all(keys, deadline(timeout), "wait " + store::describe_keys(keys));
}

int64_t EtcdBackend::num_keys(Duration timeout) {
  const std::string& p = options_.key_prefix;
  return parse_range(gateway_.call("/v3/kv/range", request(Range{p, prefix_end(p), true, false}),
                                   deadline(timeout), true, "num_keys"))
      .count;
}

bool EtcdBackend::delete_key(std::string_view key, Duration timeout) {
  // Repeated after a lost answer, the second delete finds nothing and says
  // false: the key is gone either way.
  return parse_delete(gateway_.call("/v3/kv/deleterange", request(DeleteRange{wire_key(key)}),
                                    deadline(timeout), true, "delete_key " + quote(key)))
             .deleted > 0;
}

void EtcdBackend::append(std::string_view key, std::string_view value, Duration timeout) {
  const std::string what = "append " + quote(key);
  const Deadline dl = deadline(timeout);
  const std::string k = wire_key(key);
  for (;;) {
    const auto r = read({std::string(key)}, dl, what);
    const auto& kv = r.kvs[0];
    const Compare unchanged =
        kv ? Compare{Compare::Target::kMod, Compare::Result::kEqual, k, kv->mod_revision, {}}
           : Compare{Compare::Target::kCreate, Compare::Result::kEqual, k, 0, {}};
    const std::string next = (kv ? shown(*kv) : std::string()) + std::string(value);
    if (parse_txn(gateway_.call("/v3/kv/txn", txn_request({unchanged}, {Put{k, next}}, {}), dl,
                                false, what))
            .succeeded) {
      return;
    }
  }
}

std::vector<std::string> EtcdBackend::multi_get(const std::vector<std::string>& keys,
                                                Duration timeout) {
  const Read r = read_all(keys, deadline(timeout), "multi_get " + store::describe_keys(keys));
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& kv : r.kvs) out.push_back(shown(*kv));
  return out;
}

std::vector<std::string> EtcdBackend::multi_get_present(const std::vector<std::string>& keys,
                                                        Duration timeout) {
  const Read r = read(keys, deadline(timeout), "multi_get " + store::describe_keys(keys));
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& kv : r.kvs) out.push_back(kv ? shown(*kv) : std::string());
  return out;
}

void EtcdBackend::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values, Duration timeout) {
  const std::string what =
      keys.size() == 1 ? "set " + quote(keys[0]) : "multi_set " + store::describe_keys(keys);
  const Deadline dl = deadline(timeout);
  // etcd refuses a key twice in one transaction; a TCPStore keeps the last.
  std::map<std::string, size_t> last;
  for (size_t i = 0; i < keys.size(); ++i) last[keys[i]] = i;
  std::vector<size_t> order;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (last[keys[i]] == i) order.push_back(i);
  }
  for (const auto& [begin, end] : chunks(order.size(), [&](size_t j) {
         return keys[order[j]].size() + values[order[j]].size() * 4 / 3 + 64;
       })) {
    (void)write(
        [&](int64_t lease_id) {
          std::vector<Op> ops;
          for (size_t j = begin; j < end; ++j) {
            ops.emplace_back(Put{wire_key(keys[order[j]]), values[order[j]], lease_id});
          }
          return txn_request({}, ops, {});
        },
        dl, what);
  }
}

void EtcdBackend::queue_push(std::string_view key, std::string_view, Duration) {
  throw StoreError("etcd: queue_push " + quote(key) +
                   ": the etcd backend has no queues (elasticrun's rendezvous uses none)");
}

std::string EtcdBackend::queue_pop(std::string_view key, Duration) {
  throw StoreError("etcd: queue_pop " + quote(key) +
                   ": the etcd backend has no queues (elasticrun's rendezvous uses none)");
}

int64_t EtcdBackend::queue_len(std::string_view key, Duration) {
  throw StoreError("etcd: queue_len " + quote(key) +
                   ": the etcd backend has no queues (elasticrun's rendezvous uses none)");
}

std::vector<std::string> EtcdBackend::list_keys(Duration timeout) {
  const std::string& p = options_.key_prefix;
  const RangeReply r =
      parse_range(gateway_.call("/v3/kv/range", request(Range{p, prefix_end(p), false, true}),
                                deadline(timeout), true, "list_keys"));
  std::vector<std::string> keys;
  for (const auto& kv : r.kvs) keys.push_back(kv.key.substr(p.size()));
  return keys;
}

void EtcdBackend::barrier(std::string_view key, int64_t, Duration) {
  throw StoreError("etcd: barrier " + quote(key) +
                   ": the etcd backend has no BARRIER (elasticrun's rendezvous uses none)");
}

store::Backend::Duration EtcdBackend::ping(Duration timeout) {
  const auto start = Clock::now();
  (void)gateway_.call("/v3/kv/range", request(Range{wire_key(""), {}, true, false}),
                      deadline(timeout), true, "ping");
  return std::chrono::duration_cast<Duration>(Clock::now() - start);
}

}  // namespace elasticrun::etcd
