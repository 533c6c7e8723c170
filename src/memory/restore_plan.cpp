#include "memory/restore_plan.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "memory/snapshot.hpp"

namespace elasticrun::memory {

RestorePlan plan_restore(const std::vector<PeerHolding>& members,
                         const std::vector<std::string>& mine) {
  // name -> the members holding it, by step, newest first.
  std::map<int64_t, std::map<std::string, std::vector<size_t>>, std::greater<>> by_step;
  for (size_t i = 0; i < members.size(); ++i) {
    for (const auto& name : members[i].snapshots) {
      if (const auto n = SnapshotName::parse(name)) by_step[n->step][name].push_back(i);
    }
  }
  const std::set<std::string> have(mine.begin(), mine.end());
  RestorePlan plan;
  for (const auto& [step, names] : by_step) {
    // Not sharded: any one will do.
    std::optional<std::string> whole;
    bool whole_here = false;
    // Sharded, by world: the ranks held.
    std::map<int, std::map<int, std::string>> shards;
    for (const auto& [name, holders] : names) {
      const auto n = SnapshotName::parse(name);
      if (!n->world) {
        whole_here = whole_here || have.count(name);
        if (!whole) whole = name;
      } else {
        shards[*n->world][n->rank] = name;
      }
    }
    for (const auto& name : mine) {
      const auto n = SnapshotName::parse(name);
      whole_here = whole_here || (n && n->step == step && !n->world);
    }
    if (whole) {
      plan.step = step;
      if (!whole_here) plan.fetches.push_back({*whole, names.at(*whole)});
      return plan;
    }
    for (const auto& [world, ranks] : shards) {
      if (static_cast<int>(ranks.size()) != world) {
        std::string missing;
        for (int r = 0; r < world; ++r) {
          if (!ranks.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        plan.incomplete.push_back("step " + std::to_string(step) + ": rank(s) " + missing + " of " +
                                  std::to_string(world) + " are on no member");
        continue;
      }
      plan.step = step;
      for (const auto& [rank, name] : ranks) {
        if (!have.count(name)) plan.fetches.push_back({name, names.at(name)});
      }
      return plan;
    }
  }
  return plan;
}

}  // namespace elasticrun::memory
