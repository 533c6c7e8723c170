// StoreClient on an etcd cluster (etcd >= 3.4, its v3 API through the JSON
// gateway): the TCPStore operations the rendezvous uses, with the same
// meaning, so that one rendezvous protocol runs on elasticrun's store and
// on etcd (docs/protocol.md, "etcd", has the mapping).
//
// Keys are StoreClientOptions::key_prefix + key, as on the wire of a
// TCPStore. What differs from elasticrun's store, by design:
// - ADD keeps a counter in the key's version, which etcd raises by one at
//   each put, atomically and in order: an increment is one put conditioned
//   on the key's value, which increments do not change, so thousands of
//   agents taking arrival indices at once never retry. The value of such
//   a key is a marker that reads (GET, MULTI_GET) as the count in decimal.
//   A negative delta, or a key SET to a decimal first, takes the slower
//   compare-and-swap path. A delta above one is that many increments,
//   which other agents' increments may fall between.
// - An operation that reached a member whose answer was lost may have
//   taken effect: writes that are safe to repeat (SET, MULTI_SET,
//   COMPARE_SET) are repeated on another member; ADD and APPEND throw
//   NetworkError saying so.
// - MULTI_GET and MULTI_SET of more keys than one transaction may hold
//   (etcd's --max-txn-ops, 128 by default) go as several transactions, so
//   they are not one snapshot.
// - With StoreClientOptions::key_ttl, the keys SET by this client live on
//   a lease of that TTL, renewed as the client keeps writing: a client
//   that stops (its agent killed) has its keys removed by etcd.
// - Queues and BARRIER are not offered (StoreError): the rendezvous uses
//   neither.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "elasticrun/store_client.hpp"
#include "etcd/gateway.hpp"
#include "store/backend.hpp"

namespace elasticrun::etcd {

// A client of the cluster, checked by one read before it returns: throws
// NetworkError naming every member's error when none serves within
// options.connect_timeout, ConfigError for TLS that cannot
// work. StoreClientOptions::secret and standbys do not apply to etcd.
StoreClient connect(const EtcdOptions& etcd, StoreClientOptions options);

class EtcdBackend final : public store::Backend {
 public:
  EtcdBackend(Gateway gateway, StoreClientOptions options);

  const std::string& endpoint() const override { return gateway_.endpoint(); }
  void set(std::string_view key, std::string_view value, Duration timeout) override;
  std::string get(std::string_view key, Duration timeout) override;
  std::string get_present(std::string_view key, Duration timeout) override;
  int64_t add(std::string_view key, int64_t delta, Duration timeout) override;
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired,
                          Duration timeout) override;
  bool check(const std::vector<std::string>& keys, Duration timeout) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  int64_t num_keys(Duration timeout) override;
  bool delete_key(std::string_view key, Duration timeout) override;
  void append(std::string_view key, std::string_view value, Duration timeout) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     Duration timeout) override;
  std::vector<std::string> multi_get_present(const std::vector<std::string>& keys,
                                             Duration timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Duration timeout) override;
  void queue_push(std::string_view key, std::string_view value, Duration timeout) override;
  std::string queue_pop(std::string_view key, Duration timeout) override;
  int64_t queue_len(std::string_view key, Duration timeout) override;
  std::vector<std::string> list_keys(Duration timeout) override;
  void barrier(std::string_view key, int64_t world_size, Duration timeout) override;
  Duration ping(Duration timeout) override;

 private:
  struct Read;  // what a multi-key read found, with the revision it was served at
  util::Deadline deadline(Duration timeout) const;
  std::string wire_key(std::string_view key) const;
  // Reads the keys (several transactions when there are many).
  Read read(const std::vector<std::string>& keys, util::Deadline dl, const std::string& what);
  // Reads until every key exists, watching the first missing one between reads.
  Read read_all(const std::vector<std::string>& keys, util::Deadline dl, const std::string& what);
  // A counter's increment by one; nullopt when the key holds something
  // other than a counter (then the compare-and-swap path adds).
  std::optional<int64_t> increment(const std::string& key, util::Deadline dl,
                                   const std::string& what);
  // Creates the key with `value` unless it exists; whether it did.
  bool create(const std::string& key, const std::string& value, util::Deadline dl,
              const std::string& what);
  int64_t add_by_swap(const std::string& key, int64_t delta, util::Deadline dl,
                      const std::string& what);
  int64_t lease(util::Deadline dl);  // the live lease for key_ttl, granted or renewed
  // Runs the write transaction `txn` makes for the client's lease (0: none).
  Json write(const std::function<Json(int64_t lease)>& txn, util::Deadline dl,
             const std::string& what);

  Gateway gateway_;
  StoreClientOptions options_;
  int64_t lease_id_ = 0;
  std::chrono::steady_clock::time_point lease_renewed_{};
};

}  // namespace elasticrun::etcd
