// The monitors over what the worker SDK publishes in its control-block slot:
// a hang (no step for longer than the hang limit), no first step within the
// start-up limit, a non-finite loss, a marked section that outlives its own
// limit. Pure logic: the agent passes what it read and the time; nothing
// here reads a clock or a file.
//
// Only workers that use the SDK publish steps, so only they are watched
// (a worker that never attached is the log rules' business). The start-up
// limit watches every rank of a node once any of them attached: the
// ranks run one script, so a rank that has not attached by then is stuck
// before it could.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "health/fault.hpp"

namespace elasticrun::health {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// --hang-timeout SECONDS|auto|off.
struct HangLimit {
  enum class Mode { kOff, kFixed, kAuto };
  Mode mode = Mode::kAuto;
  Millis fixed{0};  // kFixed
  // kAuto: this many times the slowest step among the recent ones, never
  // below the floor, and none before `auto_min_steps` steps were timed (the
  // first steps compile, allocate and warm caches).
  double auto_factor = 10;
  Millis auto_floor{std::chrono::minutes(30)};
  int auto_min_steps = 5;
  // kAuto: how many recent step times the limit looks at.
  size_t auto_window = 100;
};

struct ProgressConfig {
  HangLimit hang;
  Millis startup{0};  // 0: no start-up limit
  bool non_finite_loss = true;
};

// One look at a local rank's slot and process.
struct RankSample {
  bool running = true;  // the worker has not exited
  bool attached = false;
  int64_t step = -1;             // -1: none published yet
  bool loss_non_finite = false;  // a loss reported since the start was NaN or infinite
  double loss = 0;               // the last loss reported
  bool in_section = false;
  Millis section_limit{0};  // 0: the section has no limit of its own
  std::string section;
};

class ProgressMonitor {
 public:
  // `start`: when the attempt's workers started (the start-up limit counts from it).
  ProgressMonitor(ProgressConfig config, int local_ranks, Clock::time_point start);

  // One look at every local rank (samples[i]: local rank i). Returns the
  // fault to act on, if any: of several ranks past a limit, the one whose
  // progress stopped first (the others usually wait for it in a
  // collective). Once it returned a fault it returns no other.
  std::optional<Fault> observe(Clock::time_point now, const std::vector<RankSample>& samples);

  // The hang limit in force now (auto: from the step times seen so far);
  // nullopt while none applies.
  std::optional<Millis> hang_limit() const;
  // The slowest of the recent step times; nullopt before any was timed.
  std::optional<Millis> slowest_step() const;

 private:
  struct Rank {
    int64_t step = -1;
    Clock::time_point last_progress;  // a new step, or the end of a section
    bool in_section = false;
    Clock::time_point section_since;
  };
  void record_interval(Millis per_step);
  std::optional<Fault> check_rank(int lr, const Rank& r, const RankSample& s, Clock::time_point now,
                                  bool any_attached) const;

  ProgressConfig config_;
  Clock::time_point start_;
  std::vector<Rank> ranks_;
  std::deque<Millis> recent_;  // recent step times, all ranks, oldest first
  size_t timed_ = 0;           // step times recorded in all
  bool faulted_ = false;
};

}  // namespace elasticrun::health
