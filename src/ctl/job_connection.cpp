#include "ctl/job_connection.hpp"

#include "cli/launch_config.hpp"
#include "rendezvous/rendezvous.hpp"
#include "util/socket.hpp"
#include "util/strings.hpp"

namespace elasticrun::ctl {

std::string JobAddress::endpoint() const {
  return util::format_endpoint(host, port);
}

JobAddress parse_job_address(const std::string& what, const std::string& endpoint,
                             const std::string& run_id) {
  const cli::HostPort hp = cli::parse_endpoint(what, endpoint, kDefaultPort);
  if (hp.port == 0) {
    throw ConfigError(what + " " + util::quote(endpoint) + ": port 0 names no store");
  }
  if (run_id.empty()) throw ConfigError("--rdzv-id must not be empty");
  return {hp.host, static_cast<uint16_t>(hp.port), run_id, {}};
}

StoreClient connect_job(const JobAddress& job, std::chrono::milliseconds connect_timeout,
                        std::chrono::milliseconds timeout) {
  StoreClientOptions o;
  o.key_prefix = rendezvous::keys::prefix(job.run_id);
  o.connect_timeout = connect_timeout;
  o.timeout = timeout;
  o.secret = job.secret;
  StoreClient client = [&] {
    try {
      return StoreClient::connect(job.host, job.port, o);
    } catch (const NetworkError& e) {
      // Say first what it means for the operator; the client's message
      // ("store H:P: connect to H:P gave up after N attempts (...)") adds
      // every attempt, once its repeated "store H:P: " is dropped.
      std::string why = e.what();
      const std::string repeated = "store " + job.endpoint() + ": ";
      if (why.rfind(repeated, 0) == 0) why.erase(0, repeated.size());
      throw NetworkError("cannot reach the store at " + job.endpoint() + ": " + why);
    }
  }();
  // The first agent of a job creates `round`; without it no agent of this
  // job ever reached the store (a typo in the id, or the wrong store).
  if (!client.check({rendezvous::keys::kRound})) {
    throw NoSuchJob("no job '" + job.run_id + "' on " + job.endpoint());
  }
  return client;
}

}  // namespace elasticrun::ctl
