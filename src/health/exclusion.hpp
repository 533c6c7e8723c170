// Bad nodes: a node (a host) whose workers fault again and again, or that
// the straggler monitor flags, is excluded from the job for a cooldown that
// doubles on each repeat. Pure logic over a state the agents keep in their
// rendezvous store (rendezvous::keys::kNodeHealth), so that whichever agent
// closes a round, or leads it, reads the same exclusions.
//
// Times are wall-clock milliseconds since the epoch, passed in: the state
// outlives any one agent and is read on other hosts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::health {

struct ExclusionPolicy {
  // This many faults of a node's workers within `window` exclude the node;
  // 0: faults never exclude (a straggler or GPU verdict still does).
  int faults = 3;
  std::chrono::milliseconds window{std::chrono::minutes(10)};
  // The first exclusion lasts `cooldown`; each repeat `growth` times the last.
  std::chrono::milliseconds cooldown{std::chrono::minutes(5)};
  double growth = 2;
  std::chrono::milliseconds max_cooldown{std::chrono::hours(24)};
};

// What the job knows of one node.
struct NodeHealth {
  std::vector<int64_t> fault_times_ms;  // within the window, oldest first
  int exclusions = 0;                   // times it has been excluded
  int64_t excluded_until_ms = 0;        // 0: not excluded
  std::string reason;                   // why it was last excluded (or faulted)
};

class ExclusionState {
 public:
  // A fault of `host`'s workers at now_ms. True when it excludes the host now.
  bool record_fault(const std::string& host, int64_t now_ms, const ExclusionPolicy& policy,
                    const std::string& reason);
  // Excludes `host` at once (a straggler, a GPU error); a repeat lasts longer.
  void exclude(const std::string& host, int64_t now_ms, const ExclusionPolicy& policy,
               const std::string& reason);
  // Lets `host` back in now (elasticctl readmit); its count of exclusions
  // stays, so a relapse waits longer. False when the host is unknown.
  bool readmit(const std::string& host);

  bool excluded(const std::string& host, int64_t now_ms) const;
  // Hosts excluded at now_ms, with their record.
  std::vector<std::pair<std::string, NodeHealth>> excluded_at(int64_t now_ms) const;
  const std::map<std::string, NodeHealth>& nodes() const { return nodes_; }
  bool empty() const { return nodes_.empty(); }

  // JSON, one object; parse() throws ConfigError naming what is wrong (a
  // state written by another version keeps what it can: unknown fields
  // are ignored).
  std::string serialize() const;
  static ExclusionState parse(const std::string& text);

 private:
  std::chrono::milliseconds next_cooldown(const NodeHealth& n, const ExclusionPolicy& p) const;
  std::map<std::string, NodeHealth> nodes_;
};

}  // namespace elasticrun::health
