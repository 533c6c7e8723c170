// StoreClient forwards every call to its backend (store/backend.hpp): the
// TCPStore wire protocol (store/tcp_backend.cpp) or etcd (src/etcd/).
#include "elasticrun/store_client.hpp"
#include "store/backend.hpp"
#include "store/standby.hpp"
#include "store/tcp_backend.hpp"
#include "util/strings.hpp"

namespace elasticrun {

StoreClient::StoreClient(std::unique_ptr<store::Backend> backend) : backend_(std::move(backend)) {}
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;
StoreClient::~StoreClient() = default;

StoreClient StoreClient::connect(const std::string& host, uint16_t port,
                                 StoreClientOptions options) {
  return StoreClient(store::TcpBackend::connect(host, port, std::move(options)));
}

const std::string& StoreClient::endpoint() const {
  return backend_->endpoint();
}

void StoreClient::set(std::string_view key, std::string_view value, Duration timeout) {
  backend_->set(key, value, timeout);
}

std::string StoreClient::get(std::string_view key, Duration timeout) {
  return backend_->get(key, timeout);
}

std::string StoreClient::get_present(std::string_view key, Duration timeout) {
  return backend_->get_present(key, timeout);
}

int64_t StoreClient::add(std::string_view key, int64_t delta, Duration timeout) {
  return backend_->add(key, delta, timeout);
}

std::string StoreClient::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired, Duration timeout) {
  return backend_->compare_set(key, expected, desired, timeout);
}

bool StoreClient::check(const std::vector<std::string>& keys, Duration timeout) {
  return backend_->check(keys, timeout);
}

void StoreClient::wait(const std::vector<std::string>& keys, Duration timeout) {
  backend_->wait(keys, timeout);
}

int64_t StoreClient::num_keys(Duration timeout) {
  return backend_->num_keys(timeout);
}

bool StoreClient::delete_key(std::string_view key, Duration timeout) {
  return backend_->delete_key(key, timeout);
}

void StoreClient::append(std::string_view key, std::string_view value, Duration timeout) {
  backend_->append(key, value, timeout);
}

std::vector<std::string> StoreClient::multi_get(const std::vector<std::string>& keys,
                                                Duration timeout) {
  return backend_->multi_get(keys, timeout);
}

std::vector<std::string> StoreClient::multi_get_present(const std::vector<std::string>& keys,
                                                        Duration timeout) {
  return backend_->multi_get_present(keys, timeout);
}

void StoreClient::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values, Duration timeout) {
  if (keys.size() != values.size()) {
    throw ConfigError("multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  backend_->multi_set(keys, values, timeout);
}

void StoreClient::queue_push(std::string_view key, std::string_view value, Duration timeout) {
  backend_->queue_push(key, value, timeout);
}

std::string StoreClient::queue_pop(std::string_view key, Duration timeout) {
  return backend_->queue_pop(key, timeout);
}

int64_t StoreClient::queue_len(std::string_view key, Duration timeout) {
  return backend_->queue_len(key, timeout);
}

std::vector<std::string> StoreClient::list_keys(Duration timeout) {
  return backend_->list_keys(timeout);
}

void StoreClient::barrier(std::string_view key, int64_t world_size, Duration timeout) {
  backend_->barrier(key, world_size, timeout);
}

StoreClient::Duration StoreClient::ping(Duration timeout) {
  return backend_->ping(timeout);
}

namespace store {

std::string describe_keys(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size() && i < 8; ++i) {
    if (i) s += ", ";
    s += util::quote(keys[i]);
  }
  if (keys.size() > 8) s += ", ... (" + std::to_string(keys.size()) + " keys)";
  return s + "]";
}

util::Socket StandbyFollower::take_socket(StoreClient& client) {
  auto* tcp = dynamic_cast<TcpBackend*>(client.backend_.get());
  if (!tcp) throw StoreError("a standby follows elasticrun's store only");
  return tcp->take_socket();
}

}  // namespace store

}  // namespace elasticrun
