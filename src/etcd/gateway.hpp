// HTTP to an etcd cluster's JSON gateway (etcd >= 3.4): the member in use,
// the move to the next member when one cannot serve, and watches.
//
// Which failures move to the next member: a member that cannot be
// reached, that has no leader, or that answers 503 or "too many
// requests". A request that reached a member whose answer was lost (the
// connection broke after it was sent, or etcd said the request timed out
// or its leader changed) may have taken effect: it is sent again only when
// the caller says asking twice gives what asking once does; otherwise the
// call throws NetworkError saying its effect is unknown.
//
// Not thread-safe: one Gateway per thread, as StoreClient.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "etcd/codec.hpp"
#include "util/deadline.hpp"

namespace httplib {
class Client;
}

namespace elasticrun::etcd {

class KeyWatch;

struct EtcdOptions {
  // The cluster's client endpoints, tried in this order.
  std::vector<std::pair<std::string, uint16_t>> endpoints;
  // https (torchrun's --rdzv-conf protocol=https), with the CA that signed
  // the members' certificates and, when the cluster asks for one, this
  // client's certificate and key (--rdzv-conf cacert, cert, key).
  bool tls = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// "host:port,host:port" of the endpoints, for messages.
std::string describe(const EtcdOptions& o);

class Gateway {
 public:
  explicit Gateway(EtcdOptions options);
  ~Gateway();
  Gateway(Gateway&&) noexcept;
  Gateway& operator=(Gateway&&) noexcept;

  // POSTs `body` to `path` ("/v3/kv/range") and returns the reply. Throws
  // NetworkError when no member could be reached by `dl`, TimeoutError when
  // one was but did not answer in time (both naming each member's last
  // error), StoreError with
  // etcd's message for an error it answered, NetworkError when the effect
  // of a request that is not `repeatable` is unknown, ConfigError when TLS
  // is misconfigured (a certificate that does not load or verify).
  Json call(const char* path, const Json& body, util::Deadline dl, bool repeatable,
            const std::string& what);

  enum class WatchEnd {
    kPut,        // the key was written at or after the start revision
    kCompacted,  // that revision is compacted away: read the key again
    kTimeout,    // dl passed
  };
  // Waits until `key` is written at or after `start_revision`, or `dl`
  // passes, on a watch of its own (etcd/watch.hpp), moving to another
  // member when the one in use fails. When `dl` passes first the watch
  // stays open, and the next call for the same key waits on it whatever
  // revision it names: the open watch started no later.
  WatchEnd watch_for_put(const std::string& key, int64_t start_revision, util::Deadline dl);
  // Whether a watch on `key` is open from an earlier call: nothing was
  // written to the key since the read that started it.
  bool watching(const std::string& key) const;

  // "host:port" of the member in use.
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::unique_ptr<httplib::Client> make_client(size_t member) const;
  void use(size_t member);
  void next_member();

  EtcdOptions options_;
  size_t current_ = 0;
  std::string endpoint_;
  std::unique_ptr<httplib::Client> client_;  // kept alive between calls
  bool serving_ = false;                     // the last call was served
  std::unique_ptr<KeyWatch> watch_;          // open across calls (watch_for_put)
};

}  // namespace elasticrun::etcd
