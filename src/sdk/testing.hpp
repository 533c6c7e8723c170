// Hooks for the unit tests of the worker SDK; not part of the public API.
#pragma once

namespace elasticrun::sdk::detail {

// Forgets this process's session (the mapped block, the last step, whether
// SIGUSR1 arrived), so the next call reads the environment again, as a
// fresh process would. The SIGUSR1 handler stays installed.
void reset_session_for_testing();

}  // namespace elasticrun::sdk::detail
