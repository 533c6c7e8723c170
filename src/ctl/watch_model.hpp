// What `elasticctl watch` remembers between two looks at a job: each
// node's step rate (from the steps its heartbeats carried at the last look)
// and the events it saw happen (rounds ending, agents joining, nodes
// excluded, the job finishing), newest last. A look is a JobStatus
// (job_status.hpp); the model never talks to the store itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "ctl/job_status.hpp"

namespace elasticrun::ctl {

struct WatchEvent {
  // When the watch saw it; nullopt for what happened before it started
  // (the rounds that had ended already).
  std::optional<std::chrono::system_clock::time_point> seen;
  std::string text;
};

class WatchModel {
 public:
  static constexpr size_t kMaxEvents = 64;

  // The latest look; `now` is when it was taken.
  void update(const JobStatus& s, std::chrono::system_clock::time_point now);
  // A look that failed (the store is gone): shown as an event, once.
  void unreachable(const std::string& why, std::chrono::system_clock::time_point now);

  const std::deque<WatchEvent>& events() const { return events_; }
  // A node's steps per second over the last looks; nullopt before two.
  std::optional<double> step_rate(const std::string& node_id) const;

 private:
  struct Rate {
    int64_t step = -1;
    int64_t beat_ms = 0;
    std::optional<double> per_s;
  };

  void add(std::optional<std::chrono::system_clock::time_point> seen, std::string text);

  bool first_ = true;
  bool unreachable_ = false;
  uint64_t last_ended_ = 0;  // the newest round whose end is an event
  std::optional<uint64_t> round_;
  std::string state_;
  std::set<std::string> waiting_;   // node ids in the open round
  std::set<std::string> excluded_;  // hosts
  std::map<std::string, Rate> rates_;
  std::deque<WatchEvent> events_;
};

// "scale_up -> 3 nodes: 1 agent waiting ..." for an end record.
std::string describe_end(const rendezvous::EndRecord& e);

}  // namespace elasticrun::ctl
