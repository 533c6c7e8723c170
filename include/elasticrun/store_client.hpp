// A blocking client for elasticrun's store and for PyTorch's c10d TCPStore.
//
// It speaks the TCPStore wire protocol (docs/protocol.md) and opens with
// VALIDATE and PING, so it works against `elasticctl store`, the store an
// elasticrun agent hosts, and a `torch.distributed.TCPStore(is_master=True)`
// of PyTorch 2.5 or later.
//
// Keys are prefixed with "/" on the wire by default, exactly as
// torch.distributed.TCPStore does, so a value set here under "k" is what a
// Python worker reads with store.get("k"). Set key_prefix to "" to address raw
// keys.
//
// Every call takes a timeout (StoreClientOptions::timeout when omitted).
// Errors are exceptions from elasticrun/errors.hpp whose message names the
// endpoint and the keys involved. A client is not thread-safe: use one per
// thread. After a NetworkError or StoreError the connection is closed and
// every later call throws; after a TimeoutError from wait() or get() the
// connection stays usable (the wait is cancelled on the server).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "elasticrun/errors.hpp"

namespace elasticrun {

namespace store {
class Backend;
class StandbyFollower;
}  // namespace store

struct StoreClientOptions {
  // How long connect() keeps retrying a store that refuses or does not answer.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // Default deadline of each call.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Prepended to every key on the wire; "/" matches torch.distributed.TCPStore.
  std::string key_prefix = "/";
  // The job secret (the bytes of its file), for a store started with one:
  // connect() then proves it holds it, and that the store does, before
  // anything else (docs/protocol.md, "Authentication"). Empty: none.
  std::string secret;
  // Endpoints that serve the store once its host is lost (its standby,
  // docs/protocol.md "Standby"). With any, connect() tries each in turn
  // until one serves; a connection that breaks is replaced by one to
  // whichever serves then, and the call repeated where asking twice gives
  // what asking once does (add, append, queue_push, queue_pop and barrier
  // throw NetworkError instead: whether they took effect is unknown).
  std::vector<std::pair<std::string, uint16_t>> standbys = {};
  // On etcd (the rendezvous's etcd backend), the keys this client writes
  // live on a lease of this TTL that its writes renew: etcd removes them
  // within the TTL of the client's last write. Zero: keys live until
  // deleted. A TCPStore keeps keys for its own life and ignores it.
  std::chrono::milliseconds key_ttl{0};
};

class StoreClient {
 public:
  using Duration = std::chrono::milliseconds;
  // Use the client's default timeout.
  static constexpr Duration kDefault = Duration(-1);

  // Connects, retrying with exponential backoff and jitter while the store
  // refuses, resets or does not answer, then validates the protocol
  // (VALIDATE, PING), after the job secret's handshake when options.secret
  // is set. Throws NetworkError listing every attempt, StoreError when the
  // peer is not a TCPStore, ConfigError when the secrets do not agree (this
  // client has none and the store one, or the other way round, or they
  // differ).
  static StoreClient connect(const std::string& host, uint16_t port,
                             StoreClientOptions options = {});

  StoreClient(StoreClient&&) noexcept;
  StoreClient& operator=(StoreClient&&) noexcept;
  ~StoreClient();

  void set(std::string_view key, std::string_view value, Duration timeout = kDefault);
  // Waits until the key exists (up to the timeout), then returns its value.
  std::string get(std::string_view key, Duration timeout = kDefault);
  // GET without the WAIT that get() sends first: one request instead of two,
  // for a key the caller knows is set (it saw a key written after it). A key
  // that is not set reads as "" from elasticrun's server; never use it to
  // test for a key (check() does).
  std::string get_present(std::string_view key, Duration timeout = kDefault);
  // Adds delta to the integer stored as decimal text (0 when absent); returns the sum.
  int64_t add(std::string_view key, int64_t delta, Duration timeout = kDefault);
  // Sets desired if the current value equals expected (or the key is absent
  // and expected is empty). Returns the value after the operation; for an
  // absent key with a non-empty expected, returns expected (TCPStore's rule).
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired,
                          Duration timeout = kDefault);
  // True when every key exists now.
  bool check(const std::vector<std::string>& keys, Duration timeout = kDefault);
  // Blocks until every key exists. Throws TimeoutError naming the keys; the
  // connection remains usable.
  void wait(const std::vector<std::string>& keys, Duration timeout = kDefault);
  // Number of keys in the store (all clients' keys, not only this prefix).
  int64_t num_keys(Duration timeout = kDefault);
  // True when the key existed.
  bool delete_key(std::string_view key, Duration timeout = kDefault);
  void append(std::string_view key, std::string_view value, Duration timeout = kDefault);
  // Waits for every key, then returns their values in order.
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     Duration timeout = kDefault);
  // multi_get() without its WAIT, as get_present() is get() without it.
  std::vector<std::string> multi_get_present(const std::vector<std::string>& keys,
                                             Duration timeout = kDefault);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Duration timeout = kDefault);
  void queue_push(std::string_view key, std::string_view value, Duration timeout = kDefault);
  // Waits until the queue has an element, then pops the oldest.
  std::string queue_pop(std::string_view key, Duration timeout = kDefault);
  int64_t queue_len(std::string_view key, Duration timeout = kDefault);
  // Keys under this client's prefix, with the prefix removed (as
  // torch.distributed.TCPStore.list_keys). Needs a store of PyTorch >= 2.10
  // or elasticrun.
  std::vector<std::string> list_keys(Duration timeout = kDefault);
  // Blocks until world_size callers have arrived at key. The arrival count is
  // kept under key and never reset, as in PyTorch: use a fresh key per round.
  void barrier(std::string_view key, int64_t world_size, Duration timeout = kDefault);
  // Round trip; returns the time it took.
  Duration ping(Duration timeout = kDefault);

  // "host:port" of the store (of the etcd member in use, for etcd).
  const std::string& endpoint() const;

  // A client over another kind of server than a TCPStore: elasticrun's
  // etcd rendezvous (docs/protocol.md, "etcd") makes its clients so. The
  // backend's type is private to the library; users call connect().
  explicit StoreClient(std::unique_ptr<store::Backend> backend);

 private:
  friend class store::StandbyFollower;  // takes over a connection for its stream
  std::unique_ptr<store::Backend> backend_;
};

}  // namespace elasticrun
