// What a StoreClient talks to: the operations of PyTorch's TCPStore, with
// one implementation per kind of server. `TcpBackend` (tcp_backend.cpp)
// speaks the TCPStore wire protocol to elasticrun's store or PyTorch's;
// `etcd::EtcdBackend` (src/etcd/) gives the same meaning to each operation
// on an etcd cluster. StoreClient forwards to one and adds nothing, so the
// contracts are StoreClient's (include/elasticrun/store_client.hpp); a
// backend that cannot serve an operation throws StoreError saying so.
//
// Timeouts arrive as given: StoreClient::kDefault means the backend's own
// default (StoreClientOptions::timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace elasticrun::store {

class Backend {
 public:
  using Duration = std::chrono::milliseconds;

  virtual ~Backend() = default;

  virtual const std::string& endpoint() const = 0;

  virtual void set(std::string_view key, std::string_view value, Duration timeout) = 0;
  virtual std::string get(std::string_view key, Duration timeout) = 0;
  virtual std::string get_present(std::string_view key, Duration timeout) = 0;
  virtual int64_t add(std::string_view key, int64_t delta, Duration timeout) = 0;
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired, Duration timeout) = 0;
  virtual bool check(const std::vector<std::string>& keys, Duration timeout) = 0;
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  virtual int64_t num_keys(Duration timeout) = 0;
  virtual bool delete_key(std::string_view key, Duration timeout) = 0;
  virtual void append(std::string_view key, std::string_view value, Duration timeout) = 0;
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                             Duration timeout) = 0;
  virtual std::vector<std::string> multi_get_present(const std::vector<std::string>& keys,
                                                     Duration timeout) = 0;
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values, Duration timeout) = 0;
  virtual void queue_push(std::string_view key, std::string_view value, Duration timeout) = 0;
  virtual std::string queue_pop(std::string_view key, Duration timeout) = 0;
  virtual int64_t queue_len(std::string_view key, Duration timeout) = 0;
  virtual std::vector<std::string> list_keys(Duration timeout) = 0;
  virtual void barrier(std::string_view key, int64_t world_size, Duration timeout) = 0;
  virtual Duration ping(Duration timeout) = 0;
};

// "[k1, k2, ...]" for messages, at most eight keys named.
std::string describe_keys(const std::vector<std::string>& keys);

}  // namespace elasticrun::store
