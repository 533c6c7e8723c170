#include "memory/replication_plan.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "memory/snapshot.hpp"

namespace elasticrun::memory {

std::vector<size_t> replica_sources(size_t members, size_t me, int replicas) {
  std::vector<size_t> out;
  if (members < 2 || me >= members || replicas <= 0) return out;
  const size_t r = std::min<size_t>(static_cast<size_t>(replicas), members - 1);
  for (size_t k = 1; k <= r; ++k) out.push_back((me + members - k) % members);
  return out;
}

std::vector<std::string> to_replicate(const std::vector<std::string>& source_own,
                                      const std::vector<std::string>& mine) {
  // (world, rank) -> its newest step and that snapshot's name.
  std::map<std::pair<int, int>, std::pair<int64_t, std::string>> newest;
  for (const auto& name : source_own) {
    const auto n = SnapshotName::parse(name);
    if (!n || !n->world) continue;
    auto& slot = newest[{*n->world, n->rank}];
    if (n->step > slot.first) slot = {n->step, name};
  }
  const std::set<std::string> have(mine.begin(), mine.end());
  std::vector<std::string> out;
  for (const auto& [key, step_name] : newest) {
    if (!have.count(step_name.second)) out.push_back(step_name.second);
  }
  return out;
}

std::vector<std::string> own_snapshots(const std::vector<std::string>& all,
                                       const std::vector<std::string>& fetched) {
  const std::set<std::string> from_peers(fetched.begin(), fetched.end());
  std::vector<std::string> own;
  for (const auto& s : all) {
    if (!from_peers.count(s)) own.push_back(s);
  }
  return own;
}

std::vector<std::string> newest_shards(const std::vector<std::string>& own) {
  int64_t newest = 0;
  std::vector<std::pair<int64_t, std::string>> shards;
  for (const auto& name : own) {
    const auto n = SnapshotName::parse(name);
    if (!n || !n->world) continue;
    shards.emplace_back(n->step, name);
    newest = std::max(newest, n->step);
  }
  std::vector<std::string> out;
  for (auto& [step, name] : shards) {
    if (step == newest) out.push_back(std::move(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t safe_step(const std::vector<std::vector<std::string>>& holdings, int copies) {
  // (step, world) -> rank -> how many members hold its shards.
  std::map<std::pair<int64_t, int>, std::map<int, int>, std::greater<>> held;
  for (const auto& member : holdings) {
    // A member lists a name once; a set guards against a repeated one.
    for (const auto& name : std::set<std::string>(member.begin(), member.end())) {
      const auto n = SnapshotName::parse(name);
      if (n && n->world && n->rank < *n->world) ++held[{n->step, *n->world}][n->rank];
    }
  }
  for (const auto& [step_world, ranks] : held) {
    if (static_cast<int>(ranks.size()) != step_world.second) continue;
    if (std::all_of(ranks.begin(), ranks.end(),
                    [&](const auto& rc) { return rc.second >= copies; })) {
      return step_world.first;
    }
  }
  return 0;
}

}  // namespace elasticrun::memory
