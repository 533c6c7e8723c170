// Raises the descriptor limit of a load generator to its hard limit, and
// warns when that is still below what the run needs (connections past it
// fail). Shared by store_loadgen and rendezvous_loadgen.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <cstdio>

namespace elasticrun::bench {

inline void raise_fd_limit(const char* program, size_t need) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    std::fprintf(stderr,
                 "%s: warning: descriptor limit %llu is below the %zu this run needs; "
                 "connections past it will fail\n",
                 program, static_cast<unsigned long long>(rl.rlim_cur), need);
  }
}

}  // namespace elasticrun::bench
