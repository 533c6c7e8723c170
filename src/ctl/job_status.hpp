// `elasticctl status`: a running job's state, read from its rendezvous keys
// (docs/protocol.md, "Rendezvous") and printed as a table or as JSON.
//
// Read-only: no ADD 0 (which would create keys), no waiting for keys that
// may never come. The keys are read one after another, not atomically, so
// a status taken during a scale event may mix two rounds; every field says
// which round it is of.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctl/job_connection.hpp"
#include "elastic/policy.hpp"
#include "elasticrun/store_client.hpp"
#include "rendezvous/host_list.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/rendezvous.hpp"

namespace elasticrun::ctl {

// An agent as its join record describes it; fields it does not give are empty or 0.
struct AgentInfo {
  std::string node_id;
  std::string host;
  int local_world_size = 0;
  bool released = false;  // it gave its place back (elasticctl release)
};

struct MemberInfo {
  AgentInfo agent;
  int group_rank = 0;
  int rank_offset = -1;  // global rank of its local rank 0; -1 when unknown
  // Its latest heartbeat: when it beat, and its workers' progress (each
  // local rank's step, their samples/s); nullopt when none could be read.
  std::optional<rendezvous::HeartbeatRecord> beat;
};

// A round that ended, and how (its end record).
struct PastRound {
  uint64_t round = 0;
  rendezvous::EndRecord end;
};

// How many ended rounds status reads back (JobStatus::recent).
inline constexpr int kRecentRounds = 8;

// A node the job keeps out (health::ExclusionState), as status shows it.
struct ExcludedNode {
  std::string host;
  int64_t until_unix_ms = 0;
  int exclusions = 0;  // times it was excluded, this one included
  std::string reason;
};

struct JobStatus {
  JobAddress job;
  uint64_t open_round = 0;  // `round`: the round agents join now
  // Agents that joined the open round: spares while a round runs, everyone
  // rejoining once it ended. `joined` may exceed waiting.size() for a moment
  // (a record is written right after its index is taken).
  int64_t joined = 0;
  std::vector<AgentInfo> waiting;
  // The last closed round (open_round - 1), absent while round 1 forms.
  std::optional<uint64_t> round;
  std::string closed;               // its `closed` value: candidates, or "fail <why>"
  std::vector<MemberInfo> members;  // group-rank order
  int world_size = -1;              // workers of the round; -1 when unknown
  std::optional<rendezvous::EndRecord> end;
  // The last kRecentRounds rounds that ended, oldest first (`end`, when
  // there is one, is the last of them).
  std::vector<PastRound> recent;
  int64_t restarts = 0;                 // `failures`: TORCHELASTIC_RESTART_COUNT
  std::optional<std::string> finished;  // `job/finished`: "ok <why>" / "fail <why>"
  std::optional<std::string> policy_text;
  std::optional<elastic::PolicyState> policy;  // when policy_text parses
  std::vector<ExcludedNode> excluded;          // excluded now, from health/nodes
  // The host discovery script's list in force (hosts/allowed); nullopt
  // without a script, or before an agent published one.
  std::optional<rendezvous::HostList> allowed_hosts;
  int64_t requests = 0;  // ctl/seq
  int64_t handled = 0;   // ctl/handled

  // "forming" (round 1 waits for agents), "running", "ending" (the round
  // ended, the next one forms), "not formed" (the last round failed to
  // close: too few agents), "finished", "failed".
  std::string state() const;
};

JobStatus read_status(StoreClient& client, const JobAddress& job);

std::string format_table(const JobStatus& s, std::chrono::system_clock::time_point now);
// One JSON object (docs/elasticctl.md lists the fields), pretty-printed.
std::string format_json(const JobStatus& s);

}  // namespace elasticrun::ctl
