// This machine's addresses, as the agent needs them: what a host name
// resolves to, and whether an endpoint is this machine.
#pragma once

#include <string>

namespace elasticrun::agent {

// The first address a name resolves to, as text ("127.0.0.1", "::1"); the
// name itself when it does not resolve.
std::string resolve_numeric(const std::string& host);

// Whether `host` names this machine: localhost, a loopback address, the host
// name, or an address of one of its interfaces.
bool is_local_address(const std::string& host);

}  // namespace elasticrun::agent
