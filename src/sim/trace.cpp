#include "sim/trace.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "elasticrun/errors.hpp"
#include "sim/controller.hpp"
#include "util/strings.hpp"

namespace elasticrun::sim {
namespace {

// Most lines a trace may have: a week of events a minute apart fits.
constexpr int kMaxLines = 1'000'000;

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string name) { trace_.name = std::move(name); }

  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError(trace_.name + ":" + std::to_string(line_) + ": " + why);
  }

  void line(int number, std::string_view text) {
    line_ = number;
    const size_t hash = text.find('#');
    if (hash != std::string_view::npos) text = text.substr(0, hash);
    const auto w = words(text);
    if (w.empty()) return;
    if (w[0] == "at") return event(w);
    header(w);
  }

  Trace finish();

 private:
  // The fleet's on-demand nodes from the price line, once nodes_max is
  // known; no notices where no node is spot.
  void finish_fleet();

  int integer(std::string_view what, std::string_view text, int min) const {
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size()) {
      fail(std::string(what) + " must be an integer, not " + util::quote(text));
    }
    if (n < min) fail(std::string(what) + " must be at least " + std::to_string(min));
    return n;
  }

  double number(std::string_view what, std::string_view text) const {
    double x = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    if (ec != std::errc() || end != text.data() + text.size() || !(x >= 0)) {
      fail(std::string(what) + " must be a number >= 0, not " + util::quote(text));
    }
    return x;
  }

  Millis duration(std::string_view what, std::string_view text) const {
    auto d = parse_duration(text);
    if (!d) {
      fail(std::string(what) + ": " + util::quote(text) +
           " is not a duration (a number and a unit: ms, s, m, h, d; e.g. 90s, 1h30m)");
    }
    return *d;
  }

  // key=value pairs from w[first] on, each key from `allowed` at most once.
  std::map<std::string, std::string_view, std::less<>> pairs(
      const std::vector<std::string_view>& w, std::initializer_list<std::string_view> allowed,
      size_t first = 1) {
    std::map<std::string, std::string_view, std::less<>> out;
    for (size_t i = first; i < w.size(); ++i) {
      const size_t eq = w[i].find('=');
      if (eq == std::string_view::npos)
        fail(std::string(w[0]) + ": expected KEY=VALUE, not " + util::quote(w[i]));
      const std::string key(w[i].substr(0, eq));
      bool known = false;
      for (auto a : allowed) known = known || a == key;
      if (!known) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(std::string(w[0]) + ": unknown key " + util::quote(key) + " (known: " + list + ")");
      }
      if (!out.emplace(key, w[i].substr(eq + 1)).second) {
        fail(std::string(w[0]) + ": " + key + " given twice");
      }
    }
    return out;
  }

  void once(std::string_view key) {
    auto [it, fresh] = seen_.emplace(std::string(key), line_);
    if (!fresh)
      fail(std::string(key) + " given twice (first on line " + std::to_string(it->second) + ")");
  }

  void header(const std::vector<std::string_view>& w) {
    const std::string_view key = w[0];
    auto one_value = [&] {
      if (w.size() != 2) fail(std::string(key) + " takes one value");
      return w[1];
    };
    if (key == "throughput" || key == "policy" || key == "failures" || key == "notices" ||
        key == "price" || key == "costs") {
      if (w.size() < 2) fail(std::string(key) + " needs values");
    }
    // One `costs` line per group of policies; each policy once (costs()).
    if (key == "costs") return costs(w);
    once(key);
    if (key == "duration") {
      trace_.duration = duration(key, one_value());
      if (trace_.duration.count() <= 0) fail("duration must be above 0");
    } else if (key == "nodes_max") {
      trace_.nodes_max = integer(key, one_value(), 1);
    } else if (key == "gpus_per_node") {
      trace_.gpus_per_node = integer(key, one_value(), 1);
    } else if (key == "checkpoint_save") {
      trace_.checkpoint_save = duration(key, one_value());
    } else if (key == "checkpoint_load") {
      trace_.checkpoint_load = duration(key, one_value());
    } else if (key == "restart") {
      trace_.restart = duration(key, one_value());
    } else if (key == "node_start") {
      trace_.node_start = duration(key, one_value());
    } else if (key == "checkpoint_every") {
      trace_.checkpoint_every = duration(key, one_value());
      if (trace_.checkpoint_every->count() <= 0) fail("checkpoint_every must be above 0");
    } else if (key == "seed") {
      uint64_t s = 0;
      const auto v = one_value();
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
      if (ec != std::errc() || end != v.data() + v.size()) {
        fail("seed must be a non-negative integer, not " + util::quote(v));
      }
      trace_.seed = s;
    } else if (key == "initial") {
      trace_.initial_size = integer(key, one_value(), 1);
    } else if (key == "throughput") {
      throughput(w);
    } else if (key == "policy") {
      policy(w);
    } else if (key == "failures") {
      auto p = pairs(w, {"rate", "repair"});
      if (!p.count("rate") || !p.count("repair")) {
        fail("failures needs rate=<per node-hour> and repair=<duration>");
      }
      trace_.failures = Generator{number("rate", p.find("rate")->second),
                                  duration("repair", p.find("repair")->second), Millis(0)};
    } else if (key == "notices") {
      auto p = pairs(w, {"rate", "replace", "notice"});
      if (!p.count("rate") || !p.count("replace")) {
        fail("notices needs rate=<per node-hour> and replace=<duration> (and may have notice=)");
      }
      Generator g{number("rate", p.find("rate")->second),
                  duration("replace", p.find("replace")->second), Millis(0)};
      if (auto it = p.find("notice"); it != p.end()) g.notice = duration("notice", it->second);
      trace_.notices = g;
    } else if (key == "price") {
      price(w);
    } else if (key == "unit") {
      const std::string_view u = one_value();
      for (char c : u) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
          fail("unit must be a word (letters, digits, _ and -), not " + util::quote(u));
        }
      }
      trace_.unit = std::string(u);
    } else if (key == "work") {
      trace_.work = number("work", one_value());
      if (!(*trace_.work > 0)) fail("work must be above 0");
    } else {
      fail("unknown line " + util::quote(key) +
           " (headers: duration, nodes_max, gpus_per_node, checkpoint_save, checkpoint_load, "
           "checkpoint_every, restart, node_start, throughput, policy, seed, initial, failures, "
           "notices, price, unit, work, costs; "
           "events: at TIME WHAT N)");
    }
  }

  // price [on_demand=P] [spot=P] [spot_nodes=K]: per node-hour. One price
  // makes every node that kind; with both, spot_nodes says how many are
  // spot. Checked against nodes_max in finish().
  void price(const std::vector<std::string_view>& w) {
    auto p = pairs(w, {"on_demand", "spot", "spot_nodes"});
    Fleet& f = trace_.fleet;
    if (auto it = p.find("on_demand"); it != p.end()) {
      f.on_demand_price = number("price on_demand", it->second);
    }
    if (auto it = p.find("spot"); it != p.end()) f.spot_price = number("price spot", it->second);
    if (!f.priced()) fail("price needs on_demand=<per node-hour> and/or spot=<per node-hour>");
    const bool both = f.on_demand_price && f.spot_price;
    if (auto it = p.find("spot_nodes"); it != p.end()) {
      if (!both) fail("price: spot_nodes goes with both prices (on_demand= and spot=)");
      spot_nodes_ = integer("price spot_nodes", it->second, 0);
    } else if (both) {
      fail("price: with both prices, spot_nodes=K says how many nodes are spot");
    }
  }

  // costs POLICY[,POLICY...] [restart=D] [checkpoint_load=D] [stop_save=D]
  void costs(const std::vector<std::string_view>& w) {
    const auto& known = controller_names();
    std::vector<std::string> names;
    std::string_view rest = w[1];
    while (true) {
      const size_t comma = rest.find(',');
      const std::string name(rest.substr(0, comma));
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        fail("costs: unknown policy " + util::quote(name) + " (known: " + list + ")");
      }
      auto [it, fresh] = costs_lines_.emplace(name, line_);
      if (!fresh) {
        fail("costs: " + name + " given twice (first on line " + std::to_string(it->second) + ")");
      }
      names.push_back(name);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    auto p = pairs(w, {"restart", "checkpoint_load", "stop_save"}, 2);
    if (p.empty()) fail("costs needs restart=, checkpoint_load= or stop_save= after the policies");
    for (const std::string& name : names) {
      CostsLine& c = costs_[name];
      for (const auto& [k, v] : p) {
        const Millis d = duration("costs " + k, v);
        (k == "restart" ? c.restart : k == "checkpoint_load" ? c.checkpoint_load : c.stop_save) = d;
      }
    }
  }

  void throughput(const std::vector<std::string_view>& w) {
    std::vector<Throughput::Point> points;
    for (size_t i = 1; i < w.size(); ++i) {
      const size_t colon = w[i].find(':');
      if (colon == std::string_view::npos) {
        fail("throughput: expected NODES:TOKENS_PER_S, not " + util::quote(w[i]));
      }
      points.emplace_back(integer("throughput nodes", w[i].substr(0, colon), 1),
                          number("throughput tokens/s", w[i].substr(colon + 1)));
    }
    try {
      trace_.throughput = Throughput(std::move(points));
    } catch (const ConfigError& e) {
      fail(e.what());
    }
  }

  void policy(const std::vector<std::string_view>& w) {
    auto p = pairs(w, {"min", "max", "step", "sizes", "scaling_timeout", "faulty", "min_stable",
                       "max_stable"});
    if (!p.count("min") || !p.count("max")) fail("policy needs min=N and max=N");
    elastic::PolicyConfig& c = trace_.policy;
    c.min_replicas = integer("policy min", p.find("min")->second, 1);
    c.max_replicas = integer("policy max", p.find("max")->second, 1);
    if (auto it = p.find("step"); it != p.end())
      c.increment_step = integer("policy step", it->second, 1);
    if (auto it = p.find("sizes"); it != p.end()) {
      std::string_view rest = it->second;
      while (true) {
        const size_t comma = rest.find(',');
        c.discrete_values.push_back(integer("policy sizes", rest.substr(0, comma), 1));
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
      }
    }
    auto set = [&](const char* key, Millis& field) {
      if (auto it = p.find(key); it != p.end())
        field = duration(std::string("policy ") + key, it->second);
    };
    set("scaling_timeout", c.scaling_timeout);
    set("faulty", c.faulty_scale_down_timeout);
    set("min_stable", c.min_stable_period);
    set("max_stable", c.max_stable_period);
    // The message names the agent's flag; the key it maps to is easy to see.
    try {
      c.validate();
    } catch (const ConfigError& e) {
      fail(std::string("policy: ") + e.what());
    }
  }

  void event(const std::vector<std::string_view>& w) {
    if (w.size() != 4) fail("an event is: at TIME WHAT N (e.g. at 20h capacity 16)");
    TraceEvent e;
    e.line = line_;
    e.at = duration("at", w[1]);
    const std::string_view what = w[2];
    if (what == "capacity") {
      e.kind = EventKind::kCapacity;
    } else if (what == "preempt") {
      e.kind = EventKind::kPreempt;
    } else if (what == "fail") {
      e.kind = EventKind::kFail;
    } else if (what == "spot_notice") {
      e.kind = EventKind::kSpotNotice;
    } else if (what == "replace") {
      e.kind = EventKind::kReplace;
    } else if (what == "scale") {
      e.kind = EventKind::kScale;
    } else {
      fail("unknown event " + util::quote(what) +
           " (capacity, preempt, fail, spot_notice, replace, scale)");
    }
    e.count = integer(std::string(what) + "'s N", w[3], e.kind == EventKind::kCapacity ? 0 : 1);
    if (e.at < last_at_) {
      fail("events must be in time order: " + short_duration(e.at) + " comes after " +
           short_duration(last_at_));
    }
    last_at_ = e.at;
    if (e.at.count() == 0) {
      if (e.kind != EventKind::kCapacity) {
        fail("at 0 only `capacity N` is allowed (it sets the starting capacity)");
      }
      initial_capacity_ = e.count;
      initial_capacity_line_ = line_;
      return;
    }
    trace_.events.push_back(e);
  }

  // A `costs` line's values; what it leaves out is the trace's.
  struct CostsLine {
    std::optional<Millis> restart, checkpoint_load, stop_save;
  };

  Trace trace_;
  int line_ = 0;
  std::map<std::string, int, std::less<>> seen_;
  std::optional<int> spot_nodes_;
  std::map<std::string, CostsLine, std::less<>> costs_;
  std::map<std::string, int, std::less<>> costs_lines_;
  Millis last_at_{0};
  std::optional<int> initial_capacity_;
  int initial_capacity_line_ = 0;
};

Trace Parser::finish() {
  for (const char* key : {"duration", "nodes_max", "throughput", "policy"}) {
    if (!seen_.count(key)) throw ConfigError(trace_.name + ": no `" + std::string(key) + "` line");
  }
  trace_.initial_capacity = initial_capacity_.value_or(trace_.nodes_max);
  if (trace_.initial_capacity > trace_.nodes_max) {
    line_ = initial_capacity_line_;
    fail("capacity " + std::to_string(trace_.initial_capacity) + " is above nodes_max " +
         std::to_string(trace_.nodes_max));
  }
  for (const TraceEvent& e : trace_.events) {
    line_ = e.line;
    if (e.at >= trace_.duration) {
      fail("at " + short_duration(e.at) + " is not before the end of the trace (duration " +
           short_duration(trace_.duration) + ")");
    }
    if (e.kind == EventKind::kCapacity && e.count > trace_.nodes_max) {
      fail("capacity " + std::to_string(e.count) + " is above nodes_max " +
           std::to_string(trace_.nodes_max));
    }
  }
  finish_fleet();
  for (const auto& [name, c] : costs_) {
    trace_.policy_costs[name] = {c.restart.value_or(trace_.restart),
                                 c.checkpoint_load.value_or(trace_.checkpoint_load),
                                 c.stop_save.value_or(trace_.checkpoint_save)};
  }
  if (trace_.initial_size) {
    line_ = seen_.find("initial")->second;
    if (elastic::largest_allowed_at_most(trace_.policy, *trace_.initial_size) !=
        trace_.initial_size) {
      fail("initial " + std::to_string(*trace_.initial_size) +
           " is not one of the policy's allowed sizes");
    }
  }
  return std::move(trace_);
}

void Parser::finish_fleet() {
  Fleet& f = trace_.fleet;
  if (!f.priced()) return;
  line_ = seen_.find("price")->second;
  if (!f.spot_price) {
    f.on_demand_nodes = trace_.nodes_max;
  } else if (f.on_demand_price) {
    if (*spot_nodes_ > trace_.nodes_max) {
      fail("price: spot_nodes " + std::to_string(*spot_nodes_) + " is above nodes_max " +
           std::to_string(trace_.nodes_max));
    }
    f.on_demand_nodes = trace_.nodes_max - *spot_nodes_;
  }
  if (f.on_demand_nodes < trace_.nodes_max) return;
  // No spot node: a spot notice would have nothing to hit.
  if (trace_.notices) {
    line_ = seen_.find("notices")->second;
    fail("notices: the price line makes no node spot");
  }
  for (const TraceEvent& e : trace_.events) {
    line_ = e.line;
    if (e.kind == EventKind::kSpotNotice) fail("spot_notice: the price line makes no node spot");
  }
}

}  // namespace

RecoveryCosts Trace::recovery(std::string_view policy_name) const {
  if (auto it = policy_costs.find(policy_name); it != policy_costs.end()) return it->second;
  return {restart, checkpoint_load, checkpoint_save};
}

const char* event_name(EventKind k) {
  switch (k) {
    case EventKind::kCapacity:
      return "capacity";
    case EventKind::kPreempt:
      return "preempt";
    case EventKind::kFail:
      return "fail";
    case EventKind::kSpotNotice:
      return "spot_notice";
    case EventKind::kReplace:
      return "replace";
    case EventKind::kScale:
      return "scale";
  }
  return "?";
}

int Trace::start_size() const {
  if (initial_size) return *initial_size;
  return elastic::largest_allowed_at_most(policy, std::min(initial_capacity, policy.max_replicas))
      .value_or(elastic::smallest_allowed(policy));
}

Trace parse_trace(std::string_view text, const std::string& name) {
  Parser p(name);
  int number = 0;
  while (!text.empty()) {
    if (++number > kMaxLines) {
      throw ConfigError(name + ": more than " + std::to_string(kMaxLines) + " lines");
    }
    const size_t nl = text.find('\n');
    p.line(number, text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  return p.finish();
}

Trace load_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read trace " + util::quote(path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_trace(text.str(), path);
}

}  // namespace elasticrun::sim
