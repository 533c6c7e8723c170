// The agent under dynamic rendezvous: rounds instead of a fixed place, scale
// events, failures that restart every node, and hot spares.
#pragma once

#include <string>

#include "agent/agent.hpp"
#include "agent/attempt.hpp"

namespace elasticrun::agent {

// Runs the job's rounds on this node until the job ends; returns the exit
// code as run_agent does.
int run_dynamic(const AgentConfig& config, const NodeContext& node);

}  // namespace elasticrun::agent
