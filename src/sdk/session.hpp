// What of the worker SDK's session (worker.cpp) its other parts use; not
// part of the public API.
#pragma once

#include <cstdint>

#include "control/control_block.hpp"

namespace elasticrun::sdk::detail {

// The session's control block, mapped on first use; nullptr without one
// (not under elasticrun). Throws as the public calls do.
control::ControlBlock* session_block();
// LOCAL_RANK: the session's slot.
int session_local_rank();
// Sets, then clears, flags of the session's slot (it must have a block).
void change_slot_flags(uint32_t set, uint32_t clear);

}  // namespace elasticrun::sdk::detail
