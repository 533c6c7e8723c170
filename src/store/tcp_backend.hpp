// StoreClient's backend for a TCPStore server: elasticrun's store
// (`elasticctl store`, an agent's) or PyTorch's, over the wire protocol of
// docs/protocol.md. Contracts are StoreClient's.
#pragma once

#include <memory>
#include <string>

#include "elasticrun/store_client.hpp"
#include "store/backend.hpp"
#include "util/socket.hpp"

namespace elasticrun::store {

class TcpBackend final : public Backend {
 public:
  // As StoreClient::connect.
  static std::unique_ptr<TcpBackend> connect(const std::string& host, uint16_t port,
                                             StoreClientOptions options);
  ~TcpBackend() override;

  const std::string& endpoint() const override;
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

  // The connection itself, for the standby follower, which turns it into
  // the store's change stream; the backend is unusable afterwards.
  util::Socket take_socket();

 private:
  struct Conn;  // the connection and the call machinery
  explicit TcpBackend(std::unique_ptr<Conn> c);
  std::unique_ptr<Conn> c_;
};

}  // namespace elasticrun::store
