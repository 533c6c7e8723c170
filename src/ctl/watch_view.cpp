#include "ctl/watch_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace elasticrun::ctl {
namespace {

// A row of the progress table: a rank, or a whole node when the ranks do
// not fit.
struct Row {
  std::string who;  // "3", or "0-7"
  std::string host;
  int64_t step = -1;
  int64_t min_step = -1;  // a node row: its slowest rank
  std::optional<double> rate;
};

std::string clock_text(std::chrono::system_clock::time_point t) {
  const time_t secs = std::chrono::system_clock::to_time_t(t);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

std::string number(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string bar(int64_t step, int64_t full, int width) {
  if (width < 3) return "";
  const int inner = width - 2;
  int filled = 0;
  if (step > 0 && full > 0) {
    filled = static_cast<int>(
        std::lround(static_cast<double>(std::min(step, full)) * inner / static_cast<double>(full)));
  }
  return "[" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(inner - filled), '.') + "]";
}

std::vector<Row> rank_rows(const JobStatus& s, const WatchModel& m) {
  std::vector<Row> rows;
  for (const auto& member : s.members) {
    const auto rate = m.step_rate(member.agent.node_id);
    const std::vector<int64_t> steps =
        member.beat ? member.beat->rank_steps : std::vector<int64_t>{};
    const int n = std::max<int>(member.agent.local_world_size, static_cast<int>(steps.size()));
    for (int lr = 0; lr < n; ++lr) {
      Row r;
      r.who = member.rank_offset >= 0 ? std::to_string(member.rank_offset + lr) : "?";
      r.host = member.agent.host;
      r.step = lr < static_cast<int>(steps.size()) ? steps[static_cast<size_t>(lr)] : -1;
      r.rate = rate;
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::vector<Row> node_rows(const JobStatus& s, const WatchModel& m) {
  std::vector<Row> rows;
  for (const auto& member : s.members) {
    Row r;
    const int n = member.agent.local_world_size;
    if (member.rank_offset >= 0 && n > 0) {
      r.who = std::to_string(member.rank_offset) + "-" + std::to_string(member.rank_offset + n - 1);
    } else {
      r.who = "?";
    }
    r.host = member.agent.host;
    if (member.beat) {
      r.step = member.beat->step;
      for (int64_t st : member.beat->rank_steps) {
        r.min_step = r.min_step < 0 ? st : std::min(r.min_step, st);
      }
    }
    r.rate = m.step_rate(member.agent.node_id);
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace

std::string fit(const std::string& s, int width) {
  std::string out;
  int cols = 0;
  for (size_t i = 0; i < s.size();) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    if (ch >= 0xF0) {
      len = 4;
    } else if (ch >= 0xE0) {
      len = 3;
    } else if (ch >= 0xC0) {
      len = 2;
    }
    if (cols + 1 > width) break;
    if (ch < 0x20 || ch == 0x7F || (ch >= 0x80 && ch < 0xC0) || i + len > s.size()) {
      out += ' ';  // a control character or a stray byte: never sent to the terminal
      len = 1;
    } else {
      out.append(s, i, len);
    }
    ++cols;
    i += len;
  }
  return out;
}

std::vector<std::string> render_watch(const JobStatus& s, const WatchModel& m, const ViewOptions& o,
                                      std::chrono::system_clock::time_point now) {
  const int width = std::max(o.size.width, kMinView.width);
  const int height = std::max(o.size.height, kMinView.height);
  std::vector<std::string> lines;
  auto put = [&](const std::string& line) { lines.push_back(fit(line, width)); };

  const std::string clock = clock_text(now) + " UTC";
  std::string head = "job '" + s.job.run_id + "' on " + s.job.endpoint() + ": " + s.state();
  head = fit(head, width - static_cast<int>(clock.size()) - 1);
  put(pad(head, static_cast<size_t>(width - static_cast<int>(clock.size()))) + clock);

  int64_t spares = 0;
  for (const auto& a : s.waiting) spares += a.released ? 0 : 1;
  std::string sizes = "round " + (s.round ? std::to_string(*s.round) : std::string("-")) +
                      "   world size " + (s.world_size < 0 ? "-" : std::to_string(s.world_size)) +
                      "   nodes " + std::to_string(s.members.size()) + "   spares " +
                      std::to_string(s.state() == "running" ? spares : 0) + "   excluded " +
                      std::to_string(s.excluded.size()) + "   restarts " +
                      std::to_string(s.restarts);
  put(sizes);

  std::optional<double> samples;
  for (const auto& member : s.members) {
    if (member.beat && member.beat->samples_per_s) {
      samples = samples.value_or(0) + *member.beat->samples_per_s;
    }
  }
  std::optional<double> rate;
  if (!s.members.empty()) rate = m.step_rate(s.members.front().agent.node_id);
  std::string speed = (rate ? number(*rate, 1) : std::string("-")) + " steps/s   " +
                      (samples ? number(*samples, 0) : std::string("-")) + " samples/s";
  if (s.policy) {
    speed += "   policy: " +
             (s.policy->cap ? "size limit " + std::to_string(*s.policy->cap)
                            : std::string("no size limit")) +
             ", backoff " + std::to_string(s.policy->backoff_level);
  }
  put(speed);
  put("");

  // The progress table gets what the events' minimum leaves.
  constexpr int kFixed =
      8;  // the 4 lines above, the table's head, a gap, "last events", the footer
  constexpr int kMinEvents = 3;
  const int table_room = std::max(1, height - kFixed - kMinEvents);
  std::vector<Row> rows = rank_rows(s, m);
  bool by_node = false;
  if (static_cast<int>(rows.size()) > table_room) {
    rows = node_rows(s, m);
    by_node = true;
  }
  int64_t full = o.total_steps;
  if (full <= 0) {
    for (const auto& r : rows) full = std::max(full, r.step);
  }
  const size_t who_w = by_node ? 11 : 5, host_w = 14, step_w = 9, rate_w = 10;
  const int bar_w = width - static_cast<int>(who_w + host_w + step_w + rate_w) - 4;
  put(pad(by_node ? "RANKS" : "RANK", who_w, !by_node) + " " + pad("HOST", host_w) + " " +
      pad(o.total_steps > 0 ? "STEP OF " + std::to_string(o.total_steps) : "STEP",
          static_cast<size_t>(std::max(bar_w, 0)) + step_w + 1) +
      " " + pad("STEPS/S", rate_w, true));
  const int shown = std::min(static_cast<int>(rows.size()), table_room);
  for (int i = 0; i < shown; ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    const bool last_and_more = i == shown - 1 && shown < static_cast<int>(rows.size());
    if (last_and_more) {
      put("  ... " + std::to_string(rows.size() - static_cast<size_t>(shown) + 1) + " more " +
          (by_node ? "nodes" : "ranks") + " (a taller terminal shows them)");
      break;
    }
    std::string step = r.step >= 0 ? std::to_string(r.step) : "-";
    put(pad(r.who, who_w, !by_node) + " " + pad(fit(r.host, static_cast<int>(host_w)), host_w) +
        " " + bar(r.step, full, bar_w) + " " + pad(step, step_w, true) + " " +
        pad(r.rate ? number(*r.rate, 1) : "-", rate_w, true));
  }
  if (rows.empty()) put("  (no members: the job has no running round)");
  put("");

  put("last events:");
  const int room = height - static_cast<int>(lines.size()) - 1;
  const auto& events = m.events();
  const size_t first = events.size() > static_cast<size_t>(std::max(room, 0))
                           ? events.size() - static_cast<size_t>(std::max(room, 0))
                           : 0;
  for (size_t i = first; i < events.size(); ++i) {
    const auto& e = events[i];
    put((e.seen ? clock_text(*e.seen) : std::string("earlier ")) + "  " + e.text);
  }
  while (o.fill && static_cast<int>(lines.size()) < height - 1) lines.emplace_back();
  put("Ctrl-C quits; refreshed every " + number(o.interval_s, o.interval_s < 1 ? 1 : 0) + " s");
  return lines;
}

}  // namespace elasticrun::ctl
