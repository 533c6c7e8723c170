// The agent under the static and standalone backends: the node's place is
// fixed by the flags, and each attempt restarts this node's workers in the
// same place (static multi-node jobs restart every node together:
// static_restart.hpp).
#pragma once

#include "agent/agent.hpp"
#include "agent/attempt.hpp"

namespace elasticrun::agent {

// Runs the attempts of a fixed job on this node; returns the exit code as
// run_agent does.
int run_fixed(const AgentConfig& config, const NodeContext& node);

}  // namespace elasticrun::agent
