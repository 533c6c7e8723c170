#include "ctl/readmit.hpp"

#include "elasticrun/errors.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::ctl {

std::string readmit(StoreClient& job, const std::string& host) {
  bool was_excluded = false;
  std::string known;
  const bool wrote = rendezvous::update_exclusions(job, [&](health::ExclusionState& s) {
    known.clear();
    for (const auto& [h, n] : s.nodes()) known += (known.empty() ? "" : ", ") + h;
    was_excluded = s.excluded(host, rendezvous::now_unix_ms());
    return s.readmit(host);
  });
  if (!wrote) {
    throw ConfigError("the job has no record of host '" + host + "'" +
                      (known.empty() ? " (no node has faulted)" : " (it has: " + known + ")"));
  }
  return was_excluded
             ? "readmitted " + host + ": it rejoins as a spare, and the job may grow onto it"
             : host + " was not excluded; its fault count is cleared";
}

}  // namespace elasticrun::ctl
