#include "timeline/timeline.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "elasticrun/errors.hpp"
#include "events/event.hpp"
#include "timeline/chart.hpp"
#include "timeline/png_canvas.hpp"
#include "timeline/svg_canvas.hpp"

namespace elasticrun::timeline {
namespace {

enum class Format { kPng, kHtml };

Format format_of(const std::string& out) {
  std::string ext = std::filesystem::path(out).extension().string();
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".png") return Format::kPng;
  if (ext == ".html" || ext == ".htm") return Format::kHtml;
  throw ConfigError("-o " + out + ": the timeline is written as .png or .html, not '" + ext + "'");
}

std::string duration_text(double s) {
  char buf[32];
  const int total = static_cast<int>(s + 0.5);
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%dh%02dm", total / 3600, total / 60 % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dm%02ds", total / 60, total % 60);
  }
  return buf;
}

std::string default_title(const RunHistory& h) {
  std::string when = events::format_time(h.start_ms);  // 2026-12-02T01:02:03.456Z
  when = when.substr(0, 10) + " " + when.substr(11, 8) + " UTC";
  std::set<std::string> hosts;
  for (const auto& m : h.marks) hosts.insert(m.host);
  for (const auto& n : h.nodes) hosts.insert(n.host);
  std::string t = "elasticrun";
  if (!h.run_id.empty()) t += " run '" + h.run_id + "'";
  return t + " - " + when + " - " + duration_text(h.end_s) + " - " + std::to_string(hosts.size()) +
         (hosts.size() == 1 ? " host" : " hosts");
}

std::string kind_name(MarkKind k) {
  switch (k) {
    case MarkKind::kRound:
      return "round";
    case MarkKind::kFault:
      return "fault";
    case MarkKind::kDecision:
      return "decision";
    case MarkKind::kSection:
      return "section";
    case MarkKind::kNode:
      return "agent";
  }
  return "";
}

std::string html_page(const RunHistory& h, const std::string& title, const std::string& svg) {
  std::string rows;
  for (const auto& m : h.marks) {
    const Color c = mark_color(m);
    char dot[96];
    std::snprintf(dot, sizeof dot, "<span class=\"dot\" style=\"background:#%02x%02x%02x\"></span>",
                  c.r, c.g, c.b);
    rows += "<tr><td>" + xml_escape(m.time) + "</td><td>" + offset_text(m.t) + "</td><td>" + dot +
            kind_name(m.kind) + "</td><td>" + xml_escape(m.host) + "</td><td>" +
            xml_escape(m.label) + "</td><td>" + xml_escape(m.detail) + "</td></tr>\n";
  }
  std::string skipped;
  if (h.skipped > 0) {
    skipped = ", " + std::to_string(h.skipped) + " line(s) that were not events skipped";
  }
  // Everything inline: the page is opened from a cluster's shared disk or an
  // e-mail, where nothing can be fetched.
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         xml_escape(title) +
         "</title>\n<style>\n"
         "body{font-family:'DejaVu Sans',sans-serif;margin:16px;color:#222}\n"
         "table{border-collapse:collapse;font-size:13px;margin-top:12px}\n"
         "th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\n"
         "th{background:#f2f2f2}\n"
         "td:nth-child(6){color:#666;max-width:60em}\n"
         ".dot{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:5px}\n"
         "svg circle:hover{stroke:#000;stroke-width:2}\n"
         "</style>\n</head>\n<body>\n" +
         svg + "<p>" + std::to_string(h.events) + " events" + skipped +
         ". Hover over a dot for its details.</p>\n"
         "<table>\n<tr><th>time (UTC)</th><th>from start</th><th>kind</th><th>host</th>"
         "<th>event</th><th>details</th></tr>\n" +
         rows + "</table>\n</body>\n</html>\n";
}

// Written beside the output and renamed over it: a reader never sees half a file.
std::string temporary(const std::string& out) {
  return out + ".part";
}

void commit(const std::string& tmp, const std::string& out) {
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error("cannot write " + out + ": " + ec.message());
  }
}

}  // namespace

RunHistory write_timeline(const TimelineOptions& o) {
  const Format format = format_of(o.out);
  RunHistory h = read_history(o.logs);
  const std::string title = o.title.empty() ? default_title(h) : o.title;
  ChartLayout layout;
  layout.width = std::max(o.width, kMinWidth);
  layout.list_lines = format == Format::kPng ? o.list_lines : 0;
  const int height = chart_height(h, layout);
  const std::string tmp = temporary(o.out);
  if (format == Format::kPng) {
    PngCanvas canvas(layout.width, height);
    draw_chart(h, title, layout, canvas);
    canvas.write(tmp);
  } else {
    SvgCanvas canvas(layout.width, height);
    draw_chart(h, title, layout, canvas);
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << html_page(h, title, canvas.svg());
    out.close();
    if (!out) throw Error("cannot write " + o.out);
  }
  commit(tmp, o.out);
  return h;
}

}  // namespace elasticrun::timeline
