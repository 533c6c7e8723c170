// The timeline's picture of a run (history.hpp): the world size, the
// throughput and the steps over time, one line per node; a lane of every
// event, coloured by what it is about, with each round's end drawn across
// all panels; and, when asked, a list of the events under it (the PNG's
// legend; the HTML page has a table instead).
#pragma once

#include <string>

#include "timeline/canvas.hpp"
#include "timeline/history.hpp"

namespace elasticrun::timeline {

struct ChartLayout {
  int width = 1200;    // pixels; at least kMinWidth
  int list_lines = 0;  // events listed under the chart (the most important first)
};

inline constexpr int kMinWidth = 640;

// The height the chart needs at `layout`.
int chart_height(const RunHistory& h, const ChartLayout& layout);

void draw_chart(const RunHistory& h, const std::string& title, const ChartLayout& layout,
                Canvas& canvas);

// The colour of a mark (its kind; a round's end by how it ended), shared by
// the chart and the HTML table.
Color mark_color(const Mark& m);
// "+1:02.5" (minutes:seconds from the start), or "+12.5s" under a minute.
std::string offset_text(double t);

}  // namespace elasticrun::timeline
