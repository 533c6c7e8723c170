#include "ctl/watch_model.hpp"

namespace elasticrun::ctl {

std::string describe_end(const rendezvous::EndRecord& e) {
  std::string t = rendezvous::to_string(e.kind);
  if (e.target > 0) t += " -> " + std::to_string(e.target) + (e.target == 1 ? " node" : " nodes");
  if (!e.reason.empty()) t += ": " + e.reason;
  return t;
}

void WatchModel::add(std::optional<std::chrono::system_clock::time_point> seen, std::string text) {
  events_.push_back({seen, std::move(text)});
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void WatchModel::unreachable(const std::string& why, std::chrono::system_clock::time_point now) {
  if (!unreachable_) add(now, "store unreachable: " + why);
  unreachable_ = true;
}

void WatchModel::update(const JobStatus& s, std::chrono::system_clock::time_point now) {
  if (unreachable_) add(now, "store reachable again");
  unreachable_ = false;
  // What happened before the first look has no time: the rounds' ends.
  const std::optional<std::chrono::system_clock::time_point> seen =
      first_ ? std::nullopt : std::optional(now);
  for (const auto& r : s.recent) {
    if (r.round <= last_ended_) continue;
    add(seen, "round " + std::to_string(r.round) + " ended: " + describe_end(r.end));
    last_ended_ = r.round;
  }
  if (s.round && s.round != round_ && !s.members.empty()) {
    add(seen, "round " + std::to_string(*s.round) + " runs: " + std::to_string(s.members.size()) +
                  (s.members.size() == 1 ? " node" : " nodes") + ", world size " +
                  (s.world_size < 0 ? "?" : std::to_string(s.world_size)));
  }
  round_ = s.round;

  std::set<std::string> waiting;
  for (const auto& a : s.waiting) {
    waiting.insert(a.node_id);
    // While a round runs, an agent in the open round is a spare.
    if (!first_ && !waiting_.count(a.node_id) && s.state() == "running") {
      add(now,
          (a.host.empty() ? a.node_id : a.host) + (a.released ? " released" : " waits as a spare"));
    }
  }
  waiting_ = std::move(waiting);

  std::set<std::string> excluded;
  for (const auto& e : s.excluded) {
    excluded.insert(e.host);
    if (!excluded_.count(e.host)) add(seen, e.host + " excluded: " + e.reason);
  }
  for (const auto& host : excluded_) {
    if (!excluded.count(host)) add(now, host + " no longer excluded");
  }
  excluded_ = std::move(excluded);

  const std::string state = s.state();
  if (state != state_ && (state == "finished" || state == "failed" || state == "not formed")) {
    add(seen, "job " + state + (s.finished ? ": " + *s.finished : ""));
  }
  state_ = state;

  std::map<std::string, Rate> rates;
  for (const auto& m : s.members) {
    if (!m.beat) continue;
    Rate r{m.beat->step, m.beat->unix_ms, std::nullopt};
    auto it = rates_.find(m.agent.node_id);
    if (it != rates_.end()) {
      const Rate& before = it->second;
      r.per_s = before.per_s;
      if (m.beat->unix_ms > before.beat_ms && before.step >= 0 && m.beat->step >= before.step) {
        r.per_s = static_cast<double>(m.beat->step - before.step) * 1000.0 /
                  static_cast<double>(m.beat->unix_ms - before.beat_ms);
      } else if (m.beat->unix_ms == before.beat_ms) {
        r = before;  // the same beat as last time
      }
    }
    rates[m.agent.node_id] = r;
  }
  rates_ = std::move(rates);
  first_ = false;
}

std::optional<double> WatchModel::step_rate(const std::string& node_id) const {
  auto it = rates_.find(node_id);
  return it == rates_.end() ? std::nullopt : it->second.per_s;
}

}  // namespace elasticrun::ctl
