// Where each worker's stdout and stderr go, as torchrun's DefaultLogsSpecs
// decides it (--redirects, --tee, --local-ranks-filter), whether a log rule
// reads them (then they pass through the agent), and the line prefix
// (--log-line-prefix-template).
#pragma once

#include <filesystem>
#include <string>

#include "agent/agent.hpp"

namespace elasticrun::agent {

// Where one worker's stdout or stderr goes (torchrun's DefaultLogsSpecs).
struct StreamPlan {
  std::string file;      // log file, when redirected or tee'd
  bool tee = false;      // also to the console, line by line with the prefix
  bool discard = false;  // filtered out by --local-ranks-filter: /dev/null
  // A log rule reads it: it passes through the agent, which writes what
  // the worker would have (file, console, neither) unchanged.
  bool observed = false;
};

struct RankPlan {
  StreamPlan out, err;
  std::string prefix;
};

// The plan of local rank `local_rank` (global `rank`), its logs under rank_dir.
RankPlan plan_rank_logs(const AgentConfig& c, const std::filesystem::path& rank_dir, int local_rank,
                        int rank, const std::string& host);

}  // namespace elasticrun::agent
