// The workers' stdout and stderr as their RankPlans say (rank_logs.hpp):
// the files they write, the pipes through the agent's LogPump for the
// streams it tees or a log rule reads, /dev/null for the filtered ones,
// and torchrun's filtered_std{out,err}.log copies. On the attempt's loop.
#pragma once

#include <uv.h>

#include <filesystem>
#include <vector>

#include "agent/agent.hpp"
#include "agent/rank_logs.hpp"
#include "supervisor/log_pump.hpp"
#include "supervisor/spawn.hpp"

namespace elasticrun::agent {

class WorkerStreams {
 public:
  // `observer` hears each line of an observed stream, tagged 2 x local
  // rank (stdout) or 2 x local rank + 1 (stderr).
  WorkerStreams(uv_loop_t* loop, supervisor::LogPump::LineObserver* observer)
      : pump_(loop), observer_(observer) {}
  WorkerStreams(const WorkerStreams&) = delete;
  WorkerStreams& operator=(const WorkerStreams&) = delete;
  ~WorkerStreams();  // closes the files the agent writes; drain first

  // torchrun's filtered_std{out,err}.log in attempt_dir, created (empty)
  // whenever filters are given. Throws Error when one cannot be created.
  void open_filtered_copies(const AgentConfig& config, const std::filesystem::path& attempt_dir);

  // Sets spec's stdout_fd and stderr_fd for local rank `local_rank` per
  // `plan` (-1: the agent's own). Descriptors only the child needs go to
  // child_fds: the caller closes them once the child holds them. Throws
  // Error when a log file cannot be created.
  void wire(supervisor::SpawnSpec& spec, const RankPlan& plan, size_t local_rank,
            std::vector<int>& child_fds);

  // Reads what the pipes still hold and closes them (the attempt's end).
  void drain_and_close() { pump_.drain_and_close(); }

 private:
  int stream_fd(const StreamPlan& p, int console, const std::string& prefix,
                const supervisor::LogPump::LineCopy* copy, size_t tag, std::vector<int>& child_fds);

  supervisor::LogPump::LineCopy stdout_copy_, stderr_copy_;  // outlive pump_
  const supervisor::LogPump::LineCopy* out_copy_ = nullptr;  // the above, when filtering
  const supervisor::LogPump::LineCopy* err_copy_ = nullptr;
  supervisor::LogPump pump_;
  supervisor::LogPump::LineObserver* observer_;
  std::vector<int> parent_fds_;  // what the pump writes
};

}  // namespace elasticrun::agent
