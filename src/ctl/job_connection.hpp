// How elasticctl reaches a running job: the rendezvous store at
// --rdzv-endpoint, with the job's key prefix (/elasticrun/<rdzv-id>/).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "elasticrun/store_client.hpp"

namespace elasticrun::ctl {

// torchrun's default port for the c10d rendezvous backend.
inline constexpr int kDefaultPort = 29400;

struct JobAddress {
  std::string host;
  uint16_t port = kDefaultPort;
  std::string run_id;
  // The job secret (util/secret.hpp) its store asks for; empty: none.
  std::string secret;
  // "host:port", with brackets around IPv6 literals.
  std::string endpoint() const;
};

// Parses --rdzv-endpoint as torchrun does ("host", "host:port", "[v6]:port";
// the port defaults to 29400). Port 0 names no store. Throws ConfigError
// naming `what` (the flag).
JobAddress parse_job_address(const std::string& what, const std::string& endpoint,
                             const std::string& run_id);

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
