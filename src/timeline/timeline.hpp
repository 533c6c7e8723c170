// `elasticctl timeline LOG... -o OUT`: a run's picture from its event logs,
// as a PNG, or as one self-contained HTML page (the chart as inline SVG,
// with each event's details on hover, and a table of every event) that
// loads nothing from the network. The format follows OUT's extension.
#pragma once

#include <string>
#include <vector>

#include "timeline/history.hpp"

namespace elasticrun::timeline {

struct TimelineOptions {
  std::vector<std::string> logs;
  std::string out;    // *.png or *.html / *.htm
  std::string title;  // empty: from the logs (the run id, the start time)
  int width = 1200;
  int list_lines = 40;  // the PNG's list of events
};

// Throws ConfigError for an output of another extension (before reading
// anything), Error for an unreadable log or an unwritable output.
RunHistory write_timeline(const TimelineOptions& options);

}  // namespace elasticrun::timeline
