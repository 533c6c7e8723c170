// One frame of `elasticctl watch`: a job's state (job_status.hpp), its
// ranks' progress bars and the last events the watch saw (watch_model.hpp),
// laid out for a terminal of width x height. Pure: the terminal handling is
// watch.hpp's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ctl/job_status.hpp"
#include "ctl/watch_model.hpp"

namespace elasticrun::ctl {

struct ViewSize {
  int width = 80;
  int height = 24;
};

inline constexpr ViewSize kMinView{40, 12};

struct ViewOptions {
  ViewSize size;
  // The step a progress bar is full at; 0: the highest step of any rank.
  int64_t total_steps = 0;
  double interval_s = 1;  // for the footer
  // Pad with blank lines to the full height, the footer last (a terminal's
  // frame); else as long as what there is to show.
  bool fill = true;
};

// size.height lines (with `fill`; at most that many without), each at most
// size.width columns, without newlines or control characters.
std::vector<std::string> render_watch(const JobStatus& s, const WatchModel& m, const ViewOptions& o,
                                      std::chrono::system_clock::time_point now);

// `s` cut to `width` columns (a code point a column), control characters
// shown as spaces.
std::string fit(const std::string& s, int width);

}  // namespace elasticrun::ctl
