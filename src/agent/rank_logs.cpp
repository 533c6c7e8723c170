#include "agent/rank_logs.hpp"

#include <vector>

#include "agent/health_watch.hpp"
#include "agent/worker_env.hpp"

namespace elasticrun::agent {

RankPlan plan_rank_logs(const AgentConfig& c, const std::filesystem::path& rank_dir, int local_rank,
                        int rank, const std::string& host) {
  auto bits = [](const std::vector<int>& v, int r) {
    return static_cast<size_t>(r) < v.size() ? v[static_cast<size_t>(r)] : 0;
  };
  int tee = bits(c.tee, local_rank);
  const int redirect = bits(c.redirects, local_rank) | tee;
  const bool filtered = c.local_ranks_filter && !c.local_ranks_filter->count(local_rank);
  if (filtered) tee = 0;
  RankPlan p;
  auto plan = [&](StreamPlan& s, int bit, const char* name) {
    if (redirect & bit) s.file = (rank_dir / name).string();
    s.tee = (tee & bit) != 0;
    s.discard = filtered && s.file.empty();
  };
  plan(p.out, 1, "stdout.log");
  plan(p.err, 2, "stderr.log");
  p.out.observed = p.err.observed = rules_read_output(c, local_rank);
  p.prefix =
      substitute_template(c.log_line_prefix_template, {{"role_name", c.role},
                                                       {"rank", std::to_string(rank)},
                                                       {"local_rank", std::to_string(local_rank)},
                                                       {"hostname", host}});
  return p;
}

}  // namespace elasticrun::agent
