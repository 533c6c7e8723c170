#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

namespace elasticrun::sim {
namespace {

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string percent(double x) {
  return fixed(100 * x, 1) + "%";
}

// "4:8h 16:11.6h 0:5m": running sizes in increasing order, then the time
// not training.
std::string sizes(const RunResult& r) {
  std::string out;
  for (const auto& [nodes, time] : r.time_at_size) {
    if (nodes == 0 || time.count() == 0) continue;
    out += (out.empty() ? "" : " ") + std::to_string(nodes) + ":" + short_duration(time);
  }
  return out;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// A cost per unit, per million of them: 4 significant digits.
std::string amount_per_million(double per_unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", per_unit * 1e6);
  return buf;
}

// 90000000, 2.5e+12, 0.75: whole numbers in full up to 15 digits.
std::string amount(double x) {
  // The range check first: converting a double past int64_t is undefined.
  if (x < 1e15 && x == std::trunc(x)) return fixed(x, 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// "; work 90000000 samples; per node-hour: spot 0.424 (4 nodes)": what the
// cost columns rest on, for the heading.
std::string cost_basis(const Trace& trace) {
  std::string out;
  if (trace.work) out += "; work " + amount(*trace.work) + " " + trace.unit;
  const Fleet& f = trace.fleet;
  if (!f.priced()) return out;
  auto pool = [](const char* name, double price, int nodes) {
    return std::string(name) + " " + amount(price) + " (" + std::to_string(nodes) +
           (nodes == 1 ? " node)" : " nodes)");
  };
  out += "; per node-hour:";
  const int spot_nodes = trace.nodes_max - f.on_demand_nodes;
  if (f.on_demand_price && f.on_demand_nodes > 0) {
    out += " " + pool("on demand", *f.on_demand_price, f.on_demand_nodes);
  }
  if (f.spot_price && spot_nodes > 0) {
    out += std::string(out.back() == ':' ? " " : ", ") + pool("spot", *f.spot_price, spot_nodes);
  }
  return out;
}

}  // namespace

std::string format_table(const Trace& trace, uint64_t seed, const std::vector<RunResult>& runs) {
  std::string out = "trace " + trace.name + " (seed " + std::to_string(seed) +
                    "): " + short_duration(trace.duration) + ", up to " +
                    std::to_string(trace.nodes_max) + " nodes x " +
                    std::to_string(trace.gpus_per_node) + " GPUs";
  if (!runs.empty()) {
    const RunResult& first = runs.front();
    out += ", static allocation " + std::to_string(first.static_size) + " nodes; idle beyond it " +
           fixed(first.idle_node_hours * trace.gpus_per_node, 0) + " GPU-hours";
  }
  out += cost_basis(trace) + "\n";
  const bool priced = trace.fleet.priced();
  const std::string per_unit = "cost/1M " + trace.unit;
  std::vector<std::pair<std::string, size_t>> columns = {
      {"policy", 18},  {"goodput", 8}, {trace.unit, std::max<size_t>(7, trace.unit.size() + 1)},
      {"absorbed", 9}, {"scale", 6},   {"thrash", 7},
      {"restarts", 9}, {"lost", 7},    {"down", 7},
      {"preempt", 8}};
  if (trace.work) columns.push_back({"train", 8});
  if (priced) {
    columns.push_back({"cost", 10});
    columns.push_back({per_unit, per_unit.size() + 1});
  }
  columns.push_back({"time at each size (nodes:time)", 0});
  for (const auto& [name, width] : columns) out += pad(name, width);
  out += "\n";
  for (const RunResult& r : runs) {
    const auto absorbed = r.absorbed_idle_fraction();
    std::vector<std::string> cells = {r.policy,
                                      percent(r.goodput()),
                                      percent(r.token_efficiency()),
                                      absorbed ? percent(*absorbed) : "-",
                                      std::to_string(r.scale_events),
                                      std::to_string(r.thrash_events),
                                      std::to_string(r.restarts),
                                      short_duration(r.lost_work),
                                      short_duration(r.down),
                                      r.preempt_requests
                                          ? std::to_string(r.preempt_answered_in_one_decision) +
                                                "/" + std::to_string(r.preempt_requests)
                                          : "-"};
    if (trace.work) {
      cells.push_back(r.time_to_train ? short_duration(*r.time_to_train)
                                      : ">" + short_duration(trace.duration));
    }
    if (priced) {
      const auto per = r.cost_per_unit();
      cells.push_back(fixed(r.cost.value_or(0), 2));
      cells.push_back(per ? amount_per_million(*per) : "-");
    }
    cells.push_back(sizes(r));
    for (size_t i = 0; i < cells.size(); ++i) out += pad(cells[i], columns[i].second);
    out += "\n";
  }
  return out;
}

std::string format_json(const Trace& trace, uint64_t seed, const std::vector<RunResult>& runs) {
  using nlohmann::ordered_json;
  auto secs = [](Millis d) { return static_cast<double>(d.count()) / 1e3; };
  ordered_json j;
  j["trace"] = trace.name;
  j["seed"] = seed;
  j["duration_s"] = secs(trace.duration);
  j["nodes_max"] = trace.nodes_max;
  j["gpus_per_node"] = trace.gpus_per_node;
  if (!runs.empty()) {
    j["static_size"] = runs.front().static_size;
    j["idle_gpu_hours_beyond_static"] = runs.front().idle_node_hours * trace.gpus_per_node;
  }
  j["unit"] = trace.unit;
  j["work"] = trace.work ? ordered_json(*trace.work) : ordered_json(nullptr);
  ordered_json throughput = ordered_json::object();
  for (const auto& [nodes, rate] : trace.throughput.points()) {
    throughput[std::to_string(nodes)] = rate;
  }
  j["throughput"] = std::move(throughput);
  j["checkpoint_every_s"] =
      trace.checkpoint_every ? ordered_json(secs(*trace.checkpoint_every)) : ordered_json(nullptr);
  j["checkpoint_save_s"] = secs(trace.checkpoint_save);
  const Fleet& f = trace.fleet;
  auto maybe = [](const std::optional<double>& x) {
    return x ? ordered_json(*x) : ordered_json(nullptr);
  };
  if (f.priced()) {
    j["prices"] = {{"on_demand", maybe(f.on_demand_price)},
                   {"spot", maybe(f.spot_price)},
                   {"on_demand_nodes", f.on_demand_nodes},
                   {"spot_nodes", trace.nodes_max - f.on_demand_nodes}};
  } else {
    j["prices"] = nullptr;
  }
  ordered_json policies = ordered_json::object();
  for (const RunResult& r : runs) {
    ordered_json p;
    p["goodput"] = r.goodput();
    p["token_efficiency"] = r.token_efficiency();
    p["time_to_train_s"] =
        r.time_to_train ? ordered_json(secs(*r.time_to_train)) : ordered_json(nullptr);
    p["cost"] = maybe(r.cost);
    p["cost_per_unit"] = maybe(r.cost_per_unit());
    p["run_s"] = secs(r.duration);
    const RecoveryCosts costs = trace.recovery(r.policy);
    p["recovery"] = {{"restart_s", secs(costs.restart)},
                     {"checkpoint_load_s", secs(costs.checkpoint_load)},
                     {"stop_save_s", secs(costs.stop_save)}};
    p["spot_node_hours"] = r.spot_node_hours;
    p["on_demand_node_hours"] = r.on_demand_node_hours;
    const auto absorbed = r.absorbed_idle_fraction();
    p["absorbed_idle_fraction"] = absorbed ? ordered_json(*absorbed) : ordered_json(nullptr);
    p["absorbed_gpu_hours"] = r.absorbed_node_hours * r.gpus_per_node;
    p["scale_events"] = r.scale_events;
    p["scale_ups"] = r.scale_ups;
    p["scale_downs"] = r.scale_downs;
    p["thrash_events"] = r.thrash_events;
    p["restarts"] = r.restarts;
    p["members_lost"] = r.members_lost;
    p["decisions"] = r.decisions;
    p["preempt_requests"] = r.preempt_requests;
    p["preempt_answered_in_one_decision"] = r.preempt_answered_in_one_decision;
    p["tokens"] = r.tokens;
    p["ideal_tokens"] = r.ideal_tokens;
    p["useful_s"] = secs(r.useful);
    p["lost_work_s"] = secs(r.lost_work);
    p["checkpointing_s"] = secs(r.checkpointing);
    p["down_s"] = secs(r.down);
    ordered_json at = ordered_json::object();
    for (const auto& [nodes, time] : r.time_at_size) at[std::to_string(nodes)] = secs(time);
    p["time_at_each_size"] = std::move(at);
    // Columns, one entry per point: compact, and what a plot wants.
    ordered_json t = ordered_json::array(), capacity = ordered_json::array(),
                 world = ordered_json::array(), useful = ordered_json::array(),
                 tokens = ordered_json::array();
    for (const SeriesPoint& point : r.series) {
      t.push_back(secs(point.at));
      capacity.push_back(point.capacity);
      world.push_back(point.world);
      useful.push_back(secs(point.useful));
      tokens.push_back(point.tokens);
    }
    p["series"] = {{"t_s", std::move(t)},
                   {"capacity", std::move(capacity)},
                   {"world", std::move(world)},
                   {"useful_s", std::move(useful)},
                   {"tokens", std::move(tokens)}};
    policies[r.policy] = std::move(p);
  }
  j["policies"] = std::move(policies);
  return j.dump(2) + "\n";
}

}  // namespace elasticrun::sim
