#include "timeline/history.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include "elasticrun/errors.hpp"
#include "events/event.hpp"
#include "events/types.hpp"

namespace elasticrun::timeline {
namespace {

namespace type = events::type;
using nlohmann::json;

std::optional<double> number(const json& fields, const char* key) {
  auto it = fields.find(key);
  if (it == fields.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

int64_t integer(const json& fields, const char* key, int64_t otherwise) {
  auto it = fields.find(key);
  if (it == fields.end() || !it->is_number_integer()) return otherwise;
  return it->get<int64_t>();
}

std::string text(const json& fields, const char* key) {
  auto it = fields.find(key);
  if (it == fields.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.2f s" : "%.1f s", s);
  return buf;
}

// "ckpt 2.31 s", "rescue saved 0.80 s (8 ranks)".
std::string section_label(const Mark& m) {
  std::string out = m.group + " " + seconds_text(m.seconds);
  if (m.count > 1) out += " (" + std::to_string(m.count) + " ranks)";
  return out;
}

// The failures of a workers_end line, "rank 3 exit 1" for each.
std::string failures_text(const json& fields, std::string* what) {
  std::string out;
  auto it = fields.find("failures");
  if (it == fields.end() || !it->is_array()) return out;
  for (const auto& f : *it) {
    if (!f.is_object()) continue;
    if (!out.empty()) out += ", ";
    out += "rank " + std::to_string(integer(f, "rank", -1));
    const int64_t sig = integer(f, "signal", 0);
    out += sig > 0 ? " signal " + std::to_string(sig)
                   : " exit " + std::to_string(integer(f, "exit_code", 0));
    const std::string w = text(f, "what");
    if (what && what->empty() && !w.empty()) *what = w;
  }
  return out;
}

// The mark an event makes, if any (progress and round starts make series).
std::optional<Mark> mark_of(const events::Event& e) {
  const json& f = e.fields;
  Mark m;
  m.type = e.type;
  m.host = e.host;
  m.time = events::format_time(e.wall_ms);
  if (e.type == type::kRoundEnd) {
    m.kind = MarkKind::kRound;
    m.group = text(f, "kind");
    m.label = text(f, "kind") + " (round " + std::to_string(integer(f, "round", 0)) + ")";
    const int64_t target = integer(f, "target", 0);
    if (target > 0) m.label += " -> " + std::to_string(target) + " nodes";
    m.detail = text(f, "reason");
  } else if (e.type == type::kWorkersEnd) {
    const std::string outcome = text(f, "outcome");
    if (outcome == "failed") {
      m.kind = MarkKind::kFault;
      m.label = "workers failed: " + failures_text(f, &m.detail);
    } else if (outcome == "signaled") {
      m.label = "workers signaled";
    } else {
      return std::nullopt;  // a round's end or success: the world size shows it
    }
    if (!text(f, "fault").empty()) m.label += " (" + text(f, "fault") + ")";
  } else if (e.type == type::kNodeLost) {
    m.kind = MarkKind::kFault;
    m.label = "lost " + text(f, "node_host");
    if (const auto s = number(f, "silent_s")) m.detail = "silent for " + seconds_text(*s);
  } else if (e.type == type::kNodeExcluded) {
    m.kind = MarkKind::kFault;
    m.label = "excluded " + text(f, "node_host");
    m.detail = text(f, "reason");
  } else if (e.type == type::kHealthFault) {
    m.kind = MarkKind::kFault;
    const int64_t rank = integer(f, "rank", -1);
    m.label = text(f, "reason") + (rank >= 0 ? " rank " + std::to_string(rank) : " (node)");
    m.detail = text(f, "message");
  } else if (e.type == type::kPolicyDecision) {
    m.kind = MarkKind::kDecision;
    m.label = "policy: " + text(f, "kind");
    const int64_t target = integer(f, "target", 0);
    if (target > 0) m.label += " -> " + std::to_string(target) + " nodes";
    auto took = f.find("took_effect");
    if (took != f.end() && took->is_boolean() && !took->get<bool>()) m.label += " (not taken)";
    m.detail = text(f, "reason");
  } else if (e.type == type::kRestartDecision) {
    m.kind = MarkKind::kDecision;
    m.label = "restart: " + text(f, "action");
    m.detail = text(f, "reason");
  } else if (e.type == type::kOperatorRequest) {
    m.kind = MarkKind::kDecision;
    m.label = "request:";
    if (f.contains("scale")) m.label += " scale to " + text(f, "scale");
    if (integer(f, "release", 0) > 0) m.label += " release " + text(f, "release");
  } else if (e.type == type::kSection || e.type == type::kRescue) {
    m.kind = MarkKind::kSection;
    m.seconds = number(f, "seconds").value_or(0);
    if (e.type == type::kSection) {
      m.group = text(f, "name");
    } else {
      auto saved = f.find("saved");
      const bool ok = saved != f.end() && saved->is_boolean() && saved->get<bool>();
      m.group = ok ? "rescue saved" : "rescue not saved";
    }
    m.label = section_label(m);
    m.detail = "rank " + std::to_string(integer(f, "rank", -1));
  } else if (e.type == type::kLeave) {
    m.label = "leaves (signal " + text(f, "signal") + ")";
  } else if (e.type == type::kAgentStart) {
    m.label = "agent starts";
    m.detail = text(f, "backend") + ", nodes " + text(f, "min_nodes") + ":" + text(f, "max_nodes") +
               ", " + text(f, "nproc_per_node") + " per node";
  } else if (e.type == type::kAgentEnd) {
    m.label = "agent ends (exit " + text(f, "exit_code") + ")";
  } else if (e.type == type::kWaiting) {
    m.label = "waiting " + text(f, "waiting") + ", leaving " + text(f, "leaving") + ", excluded " +
              text(f, "excluded");
    m.listed = false;
  } else if (e.type == type::kRoundStart || e.type == type::kWorkersStart ||
             e.type == type::kProgress) {
    return std::nullopt;
  } else {
    m.label = e.type;  // a type of a later schema: shown as it is
    m.detail = f.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return m;
}

// A checkpoint save marks a section on every rank at once: one mark for
// all of them, when they end within a second of each other.
bool merge_into(Mark& last, const Mark& m) {
  if (last.kind != MarkKind::kSection || m.kind != MarkKind::kSection) return false;
  if (last.group != m.group || m.t - last.t > 1.0) return false;
  last.seconds = std::max(last.seconds, m.seconds);
  last.count += m.count;
  last.label = section_label(last);
  last.detail = std::to_string(last.count) + " ranks";
  return true;
}

std::vector<events::Event> read_events(const std::vector<std::string>& paths, int64_t& skipped) {
  std::vector<events::Event> all;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read the event log " + path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (auto e = events::parse_line(line)) {
        all.push_back(std::move(*e));
      } else {
        ++skipped;
      }
    }
    if (in.bad()) throw Error("cannot read the event log " + path);
  }
  // Stable: a file's lines keep their order where the clock gives a tie.
  std::stable_sort(all.begin(), all.end(), [](const events::Event& a, const events::Event& b) {
    return a.wall_ms < b.wall_ms;
  });
  return all;
}

}  // namespace

RunHistory read_history(const std::vector<std::string>& paths) {
  RunHistory h;
  const std::vector<events::Event> all = read_events(paths, h.skipped);
  if (all.empty()) {
    throw Error("no event in " + std::to_string(paths.size()) +
                " file(s) (is this an elasticrun --event-log file?)");
  }
  h.events = static_cast<int64_t>(all.size());
  h.start_ms = all.front().wall_ms;
  h.end_s = static_cast<double>(all.back().wall_ms - h.start_ms) / 1000.0;
  for (const auto& e : all) {
    if (e.type == type::kProgress && e.fields.contains("tokens_per_s")) h.samples = true;
    if (e.type == type::kAgentStart && h.run_id.empty()) h.run_id = text(e.fields, "run_id");
  }
  const bool dynamic = std::any_of(
      all.begin(), all.end(), [](const events::Event& e) { return e.type == type::kRoundEnd; });

  std::map<std::string, size_t> node_index;
  std::optional<int64_t> round;  // the round the world size is of
  double world = 0;
  std::vector<int64_t> ended;  // rounds whose end is marked already
  auto set_world = [&](double t, double v) {
    if (!h.world_size.empty() && h.world_size.back().v == v) return;
    if (!h.world_size.empty() && h.world_size.back().t == t) h.world_size.pop_back();
    h.world_size.push_back({t, v});
    world = v;
  };

  for (const auto& e : all) {
    const double t = static_cast<double>(e.wall_ms - h.start_ms) / 1000.0;
    const json& f = e.fields;
    if (e.type == type::kRoundStart) {
      const int64_t r = integer(f, "round", 0);
      if (!round || r > *round) {
        round = r;
        set_world(t, static_cast<double>(integer(f, "world_size", 0)));
      }
    } else if (e.type == type::kRoundEnd) {
      if (round && integer(f, "round", -1) == *round) set_world(t, 0);
    } else if ((e.type == type::kWorkersEnd && !dynamic) || e.type == type::kAgentEnd) {
      if (world > 0) set_world(t, 0);
    } else if (e.type == type::kProgress) {
      auto [it, fresh] = node_index.try_emplace(e.node, h.nodes.size());
      if (fresh) h.nodes.push_back({e.node, e.host, {}, {}});
      NodeSeries& n = h.nodes[it->second];
      int64_t top = -1;
      if (auto s = f.find("steps"); s != f.end() && s->is_array()) {
        for (const auto& v : *s) {
          if (v.is_number_integer()) top = std::max(top, v.get<int64_t>());
        }
      }
      if (top >= 0) n.step.push_back({t, static_cast<double>(top)});
      if (const auto rate = number(f, h.samples ? "tokens_per_s" : "steps_per_s")) {
        n.throughput.push_back({t, *rate});
      }
    }

    auto m = mark_of(e);
    if (!m) continue;
    m->t = t;
    if (e.type == type::kRoundEnd) {
      const int64_t r = integer(f, "round", 0);
      if (std::find(ended.begin(), ended.end(), r) != ended.end()) continue;  // another member's
      ended.push_back(r);
    }
    if (!h.marks.empty() && merge_into(h.marks.back(), *m)) continue;
    h.marks.push_back(std::move(*m));
  }
  return h;
}

}  // namespace elasticrun::timeline
