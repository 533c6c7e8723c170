#include "health/exclusion.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "elasticrun/errors.hpp"

namespace elasticrun::health {

std::chrono::milliseconds ExclusionState::next_cooldown(const NodeHealth& n,
                                                        const ExclusionPolicy& p) const {
  const double factor = std::pow(std::max(p.growth, 1.0), n.exclusions);
  const double ms = static_cast<double>(p.cooldown.count()) * factor;
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::min(ms, static_cast<double>(p.max_cooldown.count()))));
}

bool ExclusionState::record_fault(const std::string& host, int64_t now_ms,
                                  const ExclusionPolicy& policy, const std::string& reason) {
  NodeHealth& n = nodes_[host];
  n.fault_times_ms.push_back(now_ms);
  const int64_t since = now_ms - policy.window.count();
  n.fault_times_ms.erase(n.fault_times_ms.begin(),
                         std::find_if(n.fault_times_ms.begin(), n.fault_times_ms.end(),
                                      [&](int64_t t) { return t >= since; }));
  n.reason = reason;
  if (policy.faults <= 0 || static_cast<int>(n.fault_times_ms.size()) < policy.faults) {
    return false;
  }
  exclude(host, now_ms, policy,
          std::to_string(n.fault_times_ms.size()) + " faults within " +
              std::to_string(policy.window.count() / 1000) + " s, the last: " + reason);
  return true;
}

void ExclusionState::exclude(const std::string& host, int64_t now_ms, const ExclusionPolicy& policy,
                             const std::string& reason) {
  NodeHealth& n = nodes_[host];
  n.excluded_until_ms = now_ms + next_cooldown(n, policy).count();
  ++n.exclusions;
  n.fault_times_ms.clear();  // the exclusion answered them
  n.reason = reason;
}

bool ExclusionState::readmit(const std::string& host) {
  auto it = nodes_.find(host);
  if (it == nodes_.end()) return false;
  it->second.excluded_until_ms = 0;
  it->second.fault_times_ms.clear();
  return true;
}

bool ExclusionState::excluded(const std::string& host, int64_t now_ms) const {
  auto it = nodes_.find(host);
  return it != nodes_.end() && it->second.excluded_until_ms > now_ms;
}

std::vector<std::pair<std::string, NodeHealth>> ExclusionState::excluded_at(int64_t now_ms) const {
  std::vector<std::pair<std::string, NodeHealth>> out;
  for (const auto& [host, n] : nodes_) {
    if (n.excluded_until_ms > now_ms) out.emplace_back(host, n);
  }
  return out;
}

std::string ExclusionState::serialize() const {
  nlohmann::ordered_json nodes = nlohmann::ordered_json::object();
  for (const auto& [host, n] : nodes_) {
    nodes[host] = {{"faults_ms", n.fault_times_ms},
                   {"exclusions", n.exclusions},
                   {"excluded_until_ms", n.excluded_until_ms},
                   {"reason", n.reason}};
  }
  return nlohmann::ordered_json{{"version", 1}, {"nodes", nodes}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ExclusionState ExclusionState::parse(const std::string& text) {
  ExclusionState s;
  try {
    const auto j = nlohmann::json::parse(text);
    for (const auto& [host, n] : j.at("nodes").items()) {
      NodeHealth h;
      h.fault_times_ms = n.value("faults_ms", std::vector<int64_t>{});
      h.exclusions = n.value("exclusions", 0);
      h.excluded_until_ms = n.value("excluded_until_ms", int64_t{0});
      h.reason = n.value("reason", std::string());
      s.nodes_[host] = std::move(h);
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("malformed node health record: " + std::string(e.what()));
  }
  return s;
}

}  // namespace elasticrun::health
