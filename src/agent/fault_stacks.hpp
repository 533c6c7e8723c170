// Where an attempt's workers were when a health fault was found, taken
// before anything is signalled: every running worker's stacks (stacks.hpp)
// into its stacks file, then, on the attempt's loop, a wait until the
// workers' faulthandlers have finished writing (or a grace has passed),
// after which the attempt stops its workers. The loop's thread only.
#pragma once

#include <uv.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "agent/stacks.hpp"
#include "control/control_block.hpp"
#include "supervisor/worker_group.hpp"

namespace elasticrun::agent {

class FaultStacks {
 public:
  // `stack_files`: each local rank's stacks file. `loop` may be initialised
  // later: its timer is made at the first capture, and is the loop's
  // handle then (the attempt's teardown closes it with the others, uv_walk).
  FaultStacks(uv_loop_t* loop, std::vector<std::string> stack_files);
  FaultStacks(const FaultStacks&) = delete;
  FaultStacks& operator=(const FaultStacks&) = delete;

  // Each running worker of `group` with a stacks file, and whether its SDK
  // dumps on the stack signal (kFlagStacks in `block`, when there is one).
  std::vector<StackTarget> targets(const supervisor::WorkerGroup& group,
                                   const control::ControlBlock* block) const;
  // Asks each target for its stacks, returning within a budget (py-spy runs
  // in parallel; `path` is the workers' PATH, where it is looked for), and
  // logs how each was taken. `ready` then runs on the loop, once.
  void capture(const std::vector<StackTarget>& targets, const std::string& path,
               std::function<void()> ready);
  // The attempt ended first: `ready` will not run.
  void cancel();
  // The same workers in a new attempt (--inprocess-restart): its stacks
  // files, and no stacks taken yet.
  void renew(std::vector<std::string> stack_files);

  const std::vector<StackResult>& stacks() const { return stacks_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  void poll();

  uv_loop_t* loop_;
  std::vector<std::string> files_;
  bool timer_made_ = false;
  uv_timer_t timer_{};
  std::vector<StackResult> stacks_;
  std::vector<int64_t> sizes_;  // the stacks files' sizes at the last look
  std::chrono::steady_clock::time_point deadline_;
  std::function<void()> ready_;
};

}  // namespace elasticrun::agent
