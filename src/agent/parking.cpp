#include "agent/parking.hpp"

namespace elasticrun::agent {
namespace {

bool slot_has(const control::ControlBlock& block, int local_rank, pid_t pid, uint32_t flag) {
  if (local_rank < 0 || local_rank >= block.num_slots()) return false;
  const auto slot = block.read_slot(local_rank);
  return (slot.flags & flag) != 0 && static_cast<pid_t>(slot.pid) == pid;
}

}  // namespace

bool reforms(const control::ControlBlock& block, int local_rank, pid_t pid) {
  return slot_has(block, local_rank, pid, control::kFlagInprocess);
}

bool parked(const control::ControlBlock& block, int local_rank, pid_t pid) {
  return slot_has(block, local_rank, pid, control::kFlagParked);
}

util::Status publish_reform(control::ControlBlock& block, uint64_t generation, int world_size,
                            const std::vector<control::RankEnv>& ranks) {
  // The file first: a worker that sees the event reads a file that is there.
  if (auto st =
          control::write_assignment(control::assignment_path(block.path()), generation, ranks);
      !st)
    return st;
  control::ControlBlock::Event ev;
  ev.generation = generation;
  ev.kind = control::EventKind::reform;
  ev.next_world_size = world_size;
  ev.reason = "round " + std::to_string(generation) + ": " + std::to_string(world_size) + " ranks";
  block.publish_event(ev);
  return util::Status::ok();
}

void dismiss_parked(control::ControlBlock& block, const std::string& reason) {
  control::ControlBlock::Event ev = block.read_event();
  ev.kind = control::EventKind::shutdown;
  ev.stop_step = -1;
  ev.next_world_size = -1;
  ev.deadline_unix_ms = 0;
  ev.reason = reason;
  block.publish_event(ev);
}

}  // namespace elasticrun::agent
