// torchrun's failure report: every failed worker with time, host, rank, exit
// code or signal, pid, error file and traceback, and the earliest failure
// named as the root cause. The layout is torchrun's, so that log scrapers
// written for torchrun keep working.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/stacks.hpp"
#include "health/fault.hpp"
#include "supervisor/worker_group.hpp"

namespace elasticrun::agent {

struct FailureReport {
  std::string script_name;
  std::vector<supervisor::WorkerExit> failures;
  // TORCHELASTIC_ERROR_FILE of each local rank.
  std::vector<std::string> error_files;
  // The agent's own TORCHELASTIC_ERROR_FILE, if it has one: the root
  // cause's error file is copied there with errorCode added, as torchrun
  // does; when the root cause wrote none, a short message is written (torchrun
  // writes nothing and only logs, leaving the parent without a reason).
  std::string agent_error_file;
  // A health fault that stopped the workers: it is the root cause, shown
  // with the beginning of the stacks recorded for its rank.
  std::optional<health::Fault> fault;
  std::vector<StackResult> stacks;
  std::vector<std::string> stack_files;  // of each local rank

  // The text torchrun prints (leading newline included).
  std::string format(int rank_offset) const;
  // Prints the report to stderr and writes the agent's error file.
  void print(int rank_offset) const;
};

}  // namespace elasticrun::agent
