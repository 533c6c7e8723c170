// In-process re-formation for C++ workers (include/elasticrun/inprocess.hpp):
// the agent's side of the contract is src/agent/parking.cpp; the Python
// SDK's is python/elasticrun/inprocess.py, call for call.
#include "elasticrun/inprocess.hpp"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "control/assignment.hpp"
#include "control/control_block.hpp"
#include "sdk/session.hpp"

namespace elasticrun::sdk::inprocess {

namespace {

using control::ControlBlock;
using control::EventKind;

// How often a parked worker looks at the block, and one waiting for a verdict.
constexpr auto kParkPoll = std::chrono::milliseconds(2);
constexpr auto kVerdictPoll = std::chrono::milliseconds(10);
// How many looks an announced assignment may stay unreadable (2 s).
constexpr int kUnreadableLooks = 1000;

uint64_t current_generation() {
  const char* g = std::getenv("ELASTICRUN_GENERATION");
  return g != nullptr ? std::strtoull(g, nullptr, 10) : 0;
}

// The round ended by a failure (here or elsewhere): not a resize, whose
// ranks stop at an agreed step with their collectives intact.
bool ended(const ControlBlock& block, uint64_t generation) {
  const ControlBlock::Event e = block.read_event();
  const bool failure =
      e.kind == EventKind::restart || e.kind == EventKind::replace || e.kind == EventKind::shutdown;
  return e.generation == generation && failure && e.stop_step < 0;
}

}  // namespace

bool enable() {
  ControlBlock* block = detail::session_block();
  if (block == nullptr) return false;
  const uint32_t agent = block->agent_flags();
  if ((agent & control::kAgentInprocess) == 0 || (agent & control::kAgentFixed) != 0) return false;
  detail::change_slot_flags(control::kFlagInprocess, 0);
  return true;
}

bool round_failed(std::chrono::milliseconds wait) {
  ControlBlock* block = detail::session_block();
  if (block == nullptr) return false;
  const uint64_t generation = current_generation();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (ended(*block, generation)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kVerdictPoll);
  }
}

Next park() {
  ControlBlock* block = detail::session_block();
  if (block == nullptr) throw Error("inprocess::park(): no control block (not under elasticrun)");
  const int lr = detail::session_local_rank();
  if ((block->read_slot(lr).flags & control::kFlagInprocess) == 0) {
    throw Error("inprocess::park(): enable() was not called, or said no");
  }
  const uint64_t generation = current_generation();
  const std::string path = control::assignment_path(block->path());
  detail::change_slot_flags(control::kFlagParked, 0);
  int unreadable = 0;
  for (;;) {
    const ControlBlock::Event e = block->read_event();
    if (e.kind == EventKind::reform && e.generation > generation) {
      auto env = control::read_assignment(path, e.generation, lr);
      if (env) {
        for (const auto& [name, value] : env.value()) ::setenv(name.c_str(), value.c_str(), 1);
        break;
      }
      // Replaced between the event and our read: look again; but a file that
      // stays unreadable is an error (the agent starts a new process).
      if (++unreadable > kUnreadableLooks) {
        throw Error("inprocess::park(): the next round's assignment cannot be read: " +
                    env.status().message());
      }
    } else if (e.kind == EventKind::shutdown && e.stop_step < 0 && e.generation >= generation) {
      return Next::kExit;
    }
    std::this_thread::sleep_for(kParkPoll);
  }
  detail::change_slot_flags(0, control::kFlagParked | control::kFlagStopped | control::kFlagSaved);
  return Next::kRound;
}

}  // namespace elasticrun::sdk::inprocess
