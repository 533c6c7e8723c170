// `elasticctl readmit --host H`: lets an excluded node back into a running
// job before its cooldown ends (docs/health.md, "Bad nodes"). The job's
// bad-node record is updated with COMPARE_SET, as the agents update it; the
// leader then sees the node waiting as a spare and grows onto it as onto
// any other (after --scaling-timeout).
#pragma once

#include <string>

#include "elasticrun/store_client.hpp"

namespace elasticrun::ctl {

// Returns one line on what was done. Throws ConfigError when the job has no
// record of the host (the message lists the hosts it has), StoreError or
// NetworkError when the store fails.
std::string readmit(StoreClient& job, const std::string& host);

}  // namespace elasticrun::ctl
