// The rendezvous keys elasticctl reads, relative to the job's prefix
// (docs/protocol.md, "Rendezvous"). Those the agents share with elasticctl
// come from rendezvous::keys; the rest are spelled here once, as
// src/rendezvous writes them (they are private there).
#pragma once

#include <cstdint>
#include <string>

#include "rendezvous/rendezvous.hpp"

namespace elasticrun::ctl::job_keys {

inline constexpr const char* kRound = "round";  // the round open for joining
inline constexpr const char* kFailures = "failures";
inline constexpr const char* kJobFinished = "job/finished";  // "ok <why>" / "fail <why>"
// What the leader has acted on (RoundWatch::lead).
inline constexpr const char* kRequestsHandled = "ctl/handled";
inline constexpr const char* kReleaseDone = "ctl/release_done";

// "r/<n>/<name>": a key of round n.
inline std::string round_key(uint64_t round, const std::string& name) {
  return "r/" + std::to_string(round) + "/" + name;
}

}  // namespace elasticrun::ctl::job_keys
