// The rendezvous keys elasticctl reads, relative to the job's prefix
// (docs/protocol.md, "Rendezvous"), all spelled once in rendezvous::keys.
#pragma once

#include <cstdint>
#include <string>

#include "rendezvous/rendezvous.hpp"

namespace elasticrun::ctl::job_keys {

using rendezvous::keys::kFailures;
using rendezvous::keys::kJobFinished;
using rendezvous::keys::kReleaseDone;
using rendezvous::keys::kRequestsHandled;
using rendezvous::keys::kRound;
using rendezvous::keys::round_key;

}  // namespace elasticrun::ctl::job_keys
