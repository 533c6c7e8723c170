#include "ctl/job_connection.hpp"

#include "cli/launch_config.hpp"
#include "etcd/etcd_backend.hpp"
#include "rendezvous/rendezvous.hpp"
#include "util/socket.hpp"
#include "util/strings.hpp"

namespace elasticrun::ctl {

namespace {

// An etcd cluster's members and https files.
etcd::EtcdOptions etcd_options(const std::string& what, const std::string& endpoint,
                               const std::map<std::string, std::string>& conf) {
  const cli::EtcdEndpoints eps = cli::parse_etcd_endpoints(what, endpoint);
  etcd::EtcdOptions o;
  for (const auto& m : eps.members) o.endpoints.emplace_back(m.host, static_cast<uint16_t>(m.port));
  // torchrun's etcd backend and its etcd-v2 name the files differently.
  auto value = [&](const char* a, const char* b) -> std::string {
    if (auto it = conf.find(a); it != conf.end()) return it->second;
    if (auto it = conf.find(b); it != conf.end()) return it->second;
    return {};
  };
  const std::string protocol = value("protocol", "protocol");
  if (!protocol.empty() && protocol != "http" && protocol != "https") {
    throw ConfigError("--rdzv-conf protocol=" + protocol + ": expected http or https");
  }
  if (!protocol.empty() && eps.tls && *eps.tls != (protocol == "https")) {
    throw ConfigError("--rdzv-conf protocol=" + protocol + " disagrees with " + what + " " +
                      util::quote(endpoint));
  }
  o.tls = protocol == "https" || eps.tls.value_or(false);
  o.ca_file = value("cacert", "ca_cert");
  o.cert_file = value("cert", "ssl_cert");
  o.key_file = value("key", "ssl_cert_key");
  if (!o.tls && !(o.ca_file.empty() && o.cert_file.empty() && o.key_file.empty())) {
    throw ConfigError(
        "--rdzv-conf cacert, cert and key are for https: add protocol=https (or give the "
        "endpoints as https:// URLs)");
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    throw ConfigError("--rdzv-conf: a client certificate needs both cert and key");
  }
  return o;
}

}  // namespace

std::string JobAddress::endpoint() const {
  return etcd ? etcd::describe(*etcd) : util::format_endpoint(host, port);
}

JobAddress parse_job_address(const std::string& what, const std::string& endpoint,
                             const std::string& run_id, const std::string& backend,
                             const std::map<std::string, std::string>& conf) {
  if (run_id.empty()) throw ConfigError("--rdzv-id must not be empty");
  if (backend == "etcd" || backend == "etcd-v2") {
    JobAddress job;
    job.run_id = run_id;
    job.etcd = etcd_options(what, endpoint, conf);
    return job;
  }
  if (backend != "c10d") {
    throw ConfigError("--rdzv-backend " + util::quote(backend) +
                      ": a job's store is c10d (elasticrun's), etcd or etcd-v2");
  }
  const cli::HostPort hp = cli::parse_endpoint(what, endpoint, kDefaultPort);
  if (hp.port == 0) {
    throw ConfigError(what + " " + util::quote(endpoint) + ": port 0 names no store");
  }
  return {hp.host, static_cast<uint16_t>(hp.port), run_id, {}, std::nullopt};
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
      if (job.etcd) return etcd::connect(*job.etcd, o);
      return StoreClient::connect(job.host, job.port, o);
    } catch (const NetworkError& e) {
      // Say first what it means for the operator; the client's message
      // ("store H:P: connect to H:P gave up after N attempts (...)") adds
      // every attempt, once its repeated "store H:P: " is dropped.
      std::string why = e.what();
      const std::string repeated = (job.etcd ? "etcd " : "store ") + job.endpoint() + ": ";
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
