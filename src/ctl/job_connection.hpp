// How elasticctl (and an agent) reaches a running job: the rendezvous store
// at --rdzv-endpoint, or the etcd cluster there for --rdzv-backend etcd, with
// the job's key prefix (/elasticrun/<rdzv-id>/).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "elasticrun/store_client.hpp"
#include "etcd/gateway.hpp"

namespace elasticrun::ctl {

// torchrun's default port for the c10d rendezvous backend.
inline constexpr int kDefaultPort = 29400;

struct JobAddress {
  std::string host;
  uint16_t port = kDefaultPort;
  std::string run_id;
  // The job secret (util/secret.hpp) its store asks for; empty: none.
  std::string secret = {};
  // Set for a job on etcd (--rdzv-backend etcd or etcd-v2): its members
  // replace host and port.
  std::optional<etcd::EtcdOptions> etcd = std::nullopt;
  // "host:port", with brackets around IPv6 literals (the members, for etcd).
  std::string endpoint() const;
};

// Parses --rdzv-endpoint as torchrun does for `backend`: for c10d "host",
// "host:port", "[v6]:port" (the port defaults to 29400; port 0 names no
// store); for etcd and etcd-v2 one or more members, comma-separated, each
// "host[:port]" (2379) or an http:// or https:// URL, with https's files
// from `conf` (torchrun's --rdzv-conf keys protocol, cacert, cert, key, or
// etcd-v2's ca_cert, ssl_cert, ssl_cert_key; other keys are not read).
// Throws ConfigError naming `what` (the flag).
JobAddress parse_job_address(const std::string& what, const std::string& endpoint,
                             const std::string& run_id, const std::string& backend = "c10d",
                             const std::map<std::string, std::string>& conf = {});

// The job is not on that store: nobody ever opened a round under its id.
class NoSuchJob : public Error {
 public:
  using Error::Error;
};

// Connects to the job's store and checks that the job exists (its `round`
// key). Throws NetworkError ("cannot reach the store at host:port: ...")
// when nothing answers within connect_timeout, NoSuchJob ("no job '<id>' on
// host:port") when the store has no such job. `timeout` bounds every later
// call on the client.
StoreClient connect_job(const JobAddress& job, std::chrono::milliseconds connect_timeout,
                        std::chrono::milliseconds timeout);

}  // namespace elasticrun::ctl
