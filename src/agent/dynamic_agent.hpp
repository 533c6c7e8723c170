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

// The first address a name resolves to, as text ("127.0.0.1", "::1"); the
// name itself when it does not resolve.
std::string resolve_numeric(const std::string& host);

// Whether `host` names this machine: localhost, a loopback address, the host
// name, or an address of one of its interfaces.
bool is_local_address(const std::string& host);

}  // namespace elasticrun::agent
