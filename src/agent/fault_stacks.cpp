#include "agent/fault_stacks.hpp"

#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

// How long py-spy may take for all workers together, how long the workers'
// faulthandlers get to write their dumps before the workers are signalled
// (they take about a millisecond), and how often the agent looks whether
// they are done.
constexpr std::chrono::milliseconds kStackBudget{3000};
constexpr std::chrono::milliseconds kStackGrace{300};
constexpr uint64_t kStackPollMs = 5;

}  // namespace

FaultStacks::FaultStacks(uv_loop_t* loop, std::vector<std::string> stack_files)
    : loop_(loop), files_(std::move(stack_files)) {}

void FaultStacks::capture(const std::vector<StackTarget>& targets, const std::string& path,
                          std::function<void()> ready) {
  auto log = util::logger("agent");
  stacks_ = capture_stacks(targets, path, kStackBudget);
  for (const auto& st : stacks_) {
    log->info("local rank {}: stacks by {}{} in {}", st.local_rank, st.how,
              st.stopped ? " (it was stopped)" : "", files_[static_cast<size_t>(st.local_rank)]);
  }
  ready_ = std::move(ready);
  if (!timer_made_) {
    uv_timer_init(loop_, &timer_);
    timer_.data = this;
    timer_made_ = true;
  }
  deadline_ = std::chrono::steady_clock::now() + kStackGrace;
  sizes_.clear();
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<FaultStacks*>(t->data)->poll(); }, kStackPollMs,
      kStackPollMs);
}

void FaultStacks::poll() {
  const bool written = faulthandler_dumps_written(stacks_, files_, sizes_);
  if (!written && std::chrono::steady_clock::now() < deadline_) return;
  uv_timer_stop(&timer_);
  if (auto ready = std::move(ready_)) ready();
}

void FaultStacks::cancel() {
  if (timer_made_) uv_timer_stop(&timer_);
  ready_ = nullptr;
}

std::vector<StackTarget> FaultStacks::targets(const supervisor::WorkerGroup& group,
                                              const control::ControlBlock* block) const {
  std::vector<StackTarget> out;
  for (int lr = 0; lr < static_cast<int>(group.size()); ++lr) {
    if (group.exited(lr) || static_cast<size_t>(lr) >= files_.size()) continue;
    StackTarget t;
    t.local_rank = lr;
    t.pid = group.pid(lr);
    t.registered = block && lr < block->num_slots() &&
                   (block->read_slot(lr).flags & control::kFlagStacks) != 0;
    t.file = files_[static_cast<size_t>(lr)];
    out.push_back(t);
  }
  return out;
}

void FaultStacks::renew(std::vector<std::string> stack_files) {
  cancel();
  files_ = std::move(stack_files);
  stacks_.clear();
  sizes_.clear();
}

}  // namespace elasticrun::agent
