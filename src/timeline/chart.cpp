#include "timeline/chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "events/types.hpp"

namespace elasticrun::timeline {
namespace {

constexpr double kLeft = 72, kRight = 24, kTop = 52;
constexpr double kPanel = 140, kPanelGap = 34;
constexpr double kLaneRow = 16;
constexpr double kAxis = 34;
constexpr double kListLine = 16, kListTop = 28;
constexpr int kLanes = 5;  // one per MarkKind
// Progress comes every kProgressInterval while workers step: a silence of
// a few of them is a gap.
constexpr double kSeriesGap =
    2.5 * std::chrono::duration<double>(events::type::kProgressInterval).count();

constexpr Color kInk{34, 34, 34}, kGrey{120, 120, 120}, kGrid{228, 228, 228}, kFrame{190, 190, 190},
    kWorld{31, 119, 180}, kWorldFill{214, 231, 245};
// Nodes' lines; a ninth node reuses the first colour.
constexpr Color kPalette[] = {{31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                              {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {23, 190, 207}};

const char* lane_name(MarkKind k) {
  switch (k) {
    case MarkKind::kRound:
      return "rounds";
    case MarkKind::kFault:
      return "faults";
    case MarkKind::kDecision:
      return "decisions";
    case MarkKind::kSection:
      return "sections";
    case MarkKind::kNode:
      return "agents";
  }
  return "";
}

// About `want` round steps (1, 2 or 5 times a power of ten) covering [0, top].
double tick_step(double top, int want) {
  if (top <= 0) return 1;
  const double raw = top / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::string value_text(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  } else if (v >= 1e4) {
    std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

struct Frame {
  double x0, x1;  // the plot's left and right in pixels
  double end_s;
  double x(double t) const { return x0 + (x1 - x0) * std::clamp(t / end_s, 0.0, 1.0); }
};

// A panel's frame, grid and value axis; returns the y of a value.
struct Panel {
  double top, bottom, max;
  double y(double v) const { return bottom - (bottom - top) * std::clamp(v / max, 0.0, 1.0); }
};

Panel draw_panel(Canvas& c, const Frame& f, double top, const std::string& title, double max) {
  const double step = tick_step(max > 0 ? max : 1, 4);
  Panel p{top, top + kPanel, std::max(step, std::ceil((max > 0 ? max : 1) / step) * step)};
  c.text(f.x0, top - 8, title, 12, kInk, Anchor::kStart, true);
  for (double v = 0; v <= p.max + step / 2; v += step) {
    c.line(f.x0, p.y(v), f.x1, p.y(v), kGrid, 1);
    c.text(f.x0 - 6, p.y(v) + 4, value_text(v), 11, kGrey, Anchor::kEnd);
  }
  c.line(f.x0, top, f.x0, p.bottom, kFrame, 1);
  c.line(f.x0, p.bottom, f.x1, p.bottom, kFrame, 1);
  return p;
}

double max_of(const std::vector<Point>& pts, double floor) {
  for (const auto& p : pts) floor = std::max(floor, p.v);
  return floor;
}

// A node's line, broken where its samples stop for a while (its workers
// did not run: it waited as a spare, or its agent was gone).
void draw_series(Canvas& c, const Frame& f, const Panel& p, const std::vector<Point>& pts,
                 Color color) {
  std::vector<std::pair<double, double>> xy;
  auto flush = [&](double v) {
    if (xy.size() == 1) c.dot(xy[0].first, xy[0].second, 2.5, color, value_text(v));
    c.polyline(xy, color, 1.8);
    xy.clear();
  };
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i > 0 && pts[i].t - pts[i - 1].t > kSeriesGap) flush(pts[i - 1].v);
    xy.emplace_back(f.x(pts[i].t), p.y(pts[i].v));
  }
  if (!pts.empty()) flush(pts.back().v);
}

void draw_world(Canvas& c, const Frame& f, const Panel& p, const RunHistory& h) {
  std::vector<std::pair<double, double>> xy;
  for (size_t i = 0; i < h.world_size.size(); ++i) {
    const Point& pt = h.world_size[i];
    const double until = i + 1 < h.world_size.size() ? h.world_size[i + 1].t : h.end_s;
    if (pt.v > 0)
      c.rect(f.x(pt.t), p.y(pt.v), f.x(until) - f.x(pt.t), p.bottom - p.y(pt.v), kWorldFill);
    if (!xy.empty()) xy.emplace_back(f.x(pt.t), xy.back().second);
    xy.emplace_back(f.x(pt.t), p.y(pt.v));
    xy.emplace_back(f.x(until), p.y(pt.v));
  }
  c.polyline(xy, kWorld, 2);
}

std::string tooltip(const Mark& m) {
  std::string s = m.time + "  " + offset_text(m.t) + "  " + m.host + "\n" + m.label;
  if (!m.detail.empty()) s += "\n" + m.detail;
  return s;
}

// The marks listed under the chart: at most `n`, the most important kinds
// first (rounds, faults, decisions, sections, agents), shown in time order.
std::vector<const Mark*> listed(const RunHistory& h, int n, size_t& left_out) {
  std::vector<const Mark*> all;
  for (const auto& m : h.marks) {
    if (m.listed) all.push_back(&m);
  }
  left_out = 0;
  if (static_cast<int>(all.size()) > n) {
    std::stable_sort(all.begin(), all.end(),
                     [](const Mark* a, const Mark* b) { return a->kind < b->kind; });
    left_out = all.size() - static_cast<size_t>(n);
    all.resize(static_cast<size_t>(n));
    std::stable_sort(all.begin(), all.end(),
                     [](const Mark* a, const Mark* b) { return a->t < b->t; });
  }
  return all;
}

std::string clip(const std::string& s, double room, double size) {
  const auto fits = static_cast<size_t>(std::max(0.0, room / (kGlyphEm * size)));
  if (text_width(s, size) <= room) return s;
  // Cut at a character boundary, leaving room for the ellipsis.
  std::string out;
  size_t glyphs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if ((ch & 0xC0) != 0x80 && ++glyphs >= fits) break;
    out += s[i];
  }
  return out + "…";
}

int list_rows(const RunHistory& h, const ChartLayout& layout) {
  if (layout.list_lines <= 0) return 0;
  size_t left_out = 0;
  const auto rows = listed(h, layout.list_lines, left_out);
  return static_cast<int>(rows.size()) + (left_out > 0 ? 1 : 0);
}

double lanes_top() {
  return kTop + 3 * (kPanel + kPanelGap);
}

}  // namespace

Color mark_color(const Mark& m) {
  switch (m.kind) {
    case MarkKind::kRound:
      if (m.group == "scale_up") return {44, 160, 44};
      if (m.group == "scale_down") return {255, 127, 14};
      if (m.group == "done") return {120, 120, 120};
      if (m.group == "fail") return {0, 0, 0};
      return {214, 39, 40};  // restart, replace
    case MarkKind::kFault:
      return {214, 39, 40};
    case MarkKind::kDecision:
      return {31, 119, 180};
    case MarkKind::kSection:
      return {148, 103, 189};
    case MarkKind::kNode:
      return {120, 120, 120};
  }
  return kInk;
}

std::string offset_text(double t) {
  char buf[32];
  if (t < 60) {
    std::snprintf(buf, sizeof buf, "+%.1fs", t);
  } else {
    const int minutes = static_cast<int>(t / 60);
    std::snprintf(buf, sizeof buf, "+%d:%04.1f", minutes, t - minutes * 60.0);
  }
  return buf;
}

int chart_height(const RunHistory& h, const ChartLayout& layout) {
  const int rows = list_rows(h, layout);
  const double list = rows > 0 ? kListTop + rows * kListLine : 0;
  return static_cast<int>(lanes_top() + kLanes * kLaneRow + kAxis + list + 12);
}

void draw_chart(const RunHistory& h, const std::string& title, const ChartLayout& layout,
                Canvas& c) {
  const double width = std::max(layout.width, kMinWidth);
  const Frame f{kLeft, width - kRight, std::max(h.end_s, 1.0)};

  c.text(f.x0, 22, title, 15, kInk, Anchor::kStart, true);
  // Which colour is which node, when there are several.
  if (h.nodes.size() > 1) {
    double x = f.x0;
    for (size_t i = 0; i < h.nodes.size() && x < f.x1 - 120; ++i) {
      const Color col = kPalette[i % std::size(kPalette)];
      c.rect(x, 32, 10, 10, col);
      c.text(x + 14, 41, h.nodes[i].host, 11, kInk);
      x += 24 + text_width(h.nodes[i].host, 11);
    }
  }

  double top = kTop + 12;
  const Panel world = draw_panel(c, f, top, "world size (workers)", max_of(h.world_size, 1));
  draw_world(c, f, world, h);

  top += kPanel + kPanelGap;
  double max_rate = 0;
  for (const auto& n : h.nodes) max_rate = max_of(n.throughput, max_rate);
  const Panel rate = draw_panel(
      c, f, top, h.samples ? "throughput (samples/s)" : "throughput (steps/s)", max_rate);
  for (size_t i = 0; i < h.nodes.size(); ++i) {
    draw_series(c, f, rate, h.nodes[i].throughput, kPalette[i % std::size(kPalette)]);
  }

  top += kPanel + kPanelGap;
  double max_step = 0;
  for (const auto& n : h.nodes) max_step = max_of(n.step, max_step);
  const Panel steps = draw_panel(c, f, top, "step", max_step);
  for (size_t i = 0; i < h.nodes.size(); ++i) {
    draw_series(c, f, steps, h.nodes[i].step, kPalette[i % std::size(kPalette)]);
  }

  // The event lanes, and each round's end across every panel above them.
  const double lanes = lanes_top();
  for (int k = 0; k < kLanes; ++k) {
    const double y = lanes + k * kLaneRow;
    if (k % 2 == 0) c.rect(f.x0, y, f.x1 - f.x0, kLaneRow, {246, 246, 246});
    c.text(f.x0 - 6, y + 12, lane_name(static_cast<MarkKind>(k)), 11, kGrey, Anchor::kEnd);
  }
  const double lanes_bottom = lanes + kLanes * kLaneRow;
  for (const auto& m : h.marks) {
    if (m.kind == MarkKind::kRound) {
      c.line(f.x(m.t), kTop + 12, f.x(m.t), lanes_bottom, mark_color(m), 1, true);
    }
  }
  for (const auto& m : h.marks) {
    const double y = lanes + static_cast<int>(m.kind) * kLaneRow + kLaneRow / 2;
    c.dot(f.x(m.t), y, 4, mark_color(m), tooltip(m));
  }

  // The time axis.
  const double axis = lanes_bottom;
  c.line(f.x0, axis, f.x1, axis, kFrame, 1);
  const double step = tick_step(f.end_s, std::max(4, static_cast<int>((f.x1 - f.x0) / 110)));
  for (double t = 0; t <= f.end_s + step / 1000; t += step) {
    c.line(f.x(t), axis, f.x(t), axis + 4, kFrame, 1);
    c.text(f.x(t), axis + 17, offset_text(t), 11, kGrey, Anchor::kMiddle);
  }

  if (layout.list_lines <= 0) return;
  size_t left_out = 0;
  const auto rows = listed(h, layout.list_lines, left_out);
  double y = axis + kAxis + kListTop - 6;
  for (const Mark* m : rows) {
    c.dot(f.x0 - 60 + 4, y - 4, 4, mark_color(*m), tooltip(*m));
    const std::string head = offset_text(m->t) + "  " + m->label + "  [" + m->host + "]";
    c.text(f.x0 - 60 + 14, y, head, 12, kInk);
    const double after = f.x0 - 60 + 14 + text_width(head, 12) + 14;
    if (!m->detail.empty() && after < f.x1 - 40) {
      c.text(after, y, clip(m->detail, f.x1 - after, 12), 12, kGrey);
    }
    y += kListLine;
  }
  if (left_out > 0) {
    c.text(f.x0 - 60 + 14, y,
           "... and " + std::to_string(left_out) +
               " more events (the HTML timeline, -o run.html, lists them all)",
           12, kGrey);
  }
}

}  // namespace elasticrun::timeline
