// `elasticctl watch`: a live view of a running job in the terminal, read
// from its rendezvous store as `status` reads it, redrawn in place every
// interval (and at once when the terminal is resized) until Ctrl-C.
//
// On a terminal it draws on the alternate screen with the cursor hidden
// and gives both back on exit, so the shell's screen is as it was; when
// stdout is not a terminal (a pipe, a file) it prints one plain frame per
// interval, or one with --once. A store that stops answering is shown and
// retried; the watch exits only on SIGINT, SIGTERM or SIGHUP (status 0), or
// after the first frame with --once.
#pragma once

#include <chrono>
#include <cstdint>

#include "ctl/job_connection.hpp"

namespace elasticrun::ctl {

struct WatchOptions {
  JobAddress job;
  std::chrono::milliseconds connect_timeout{5000};
  // Bounds every store call of a look: short, since Ctrl-C is taken
  // between looks.
  std::chrono::milliseconds call_timeout{2000};
  std::chrono::milliseconds interval{1000};
  int64_t total_steps = 0;  // a full progress bar; 0: the highest rank's step
  bool once = false;
};

// Throws NetworkError / NoSuchJob only for the first look (a job that is
// not there is an error, not something to watch).
int run_watch(const WatchOptions& options);

}  // namespace elasticrun::ctl
