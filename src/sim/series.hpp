// The run over time (RunResult::series): one point per change of the
// capacity or of the world size, not one per second, and the progress each
// point learns once the stretch of training it fell in is over.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/duration.hpp"
#include "sim/stretch.hpp"

namespace elasticrun::sim {

// The job's state from `at` until the next point.
struct SeriesPoint {
  Millis at{0};
  int capacity = 0;  // nodes available to the job
  int world = 0;     // nodes training; 0 while saving, restarting, loading or waiting
  // Training done by `at` whose results survive (work a later crash undoes
  // is not counted), and the tokens it processed. Between two points both
  // grow about linearly while the world size is above 0 (periodic saves
  // stall them briefly) and stay flat otherwise: after a crash a point at
  // the last completed checkpoint keeps that true.
  Millis useful{0};
  double tokens = 0;
};

// Writes a run's points into `points`, which must outlive it.
class SeriesRecorder {
 public:
  explicit SeriesRecorder(std::vector<SeriesPoint>& points) : points_(points) {}

  // The state after everything that happened at p.at: a new point when the
  // capacity or the world size changed (the last one of an instant wins; a
  // change undone within the instant is none), always when `always`. Points
  // taken while training hold the progress before the stretch until
  // stretch_ended() completes them.
  void mark(const SeriesPoint& p, bool always);

  // A stretch of training starts after the points recorded so far.
  void stretch_started() { stretch_start_ = points_.size(); }

  // The stretch that started at `since` ended with `s` done (stretch()), of
  // which `kept` survives, at `rate` tokens/s and `world` nodes, after
  // `useful` and `tokens` of progress before it. Its points learn how much
  // of their training survived; after a crash a point at the last completed
  // checkpoint is added, where progress stops.
  void stretch_ended(const Trace& trace, Millis since, const Stretch& s, Millis kept, double rate,
                     int world, Millis useful, double tokens);

 private:
  std::vector<SeriesPoint>& points_;
  size_t stretch_start_ = 0;  // the first point of the running stretch
};

}  // namespace elasticrun::sim
