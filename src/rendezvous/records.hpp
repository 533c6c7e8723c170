// Every key the dynamic rendezvous keeps in the store, and every value it
// writes there, made and parsed here and nowhere else (docs/protocol.md,
// "Rendezvous", describes them). The agents, the round watch and elasticctl
// all go through these types, so a format changes in one place.
//
// Parsers come in two strengths. parse() is for the agents, which wrote
// the value themselves: anything malformed is a StoreError naming the
// value. try_parse() is for readers that must show what they can of a job
// run by another version (elasticctl status): nullopt instead of a throw.
// Both accept fields past the ones they know, so that a newer agent may
// append some.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::rendezvous {

using Millis = std::chrono::milliseconds;

namespace keys {
std::string prefix(const std::string& run_id);                 // "/elasticrun/<run_id>/"
inline constexpr const char* kScaleRequest = "ctl/scale";      // decimal N
inline constexpr const char* kReleaseRequest = "ctl/release";  // ADD K
inline constexpr const char* kRequestSeq = "ctl/seq";          // ADD 1 after each request
inline constexpr const char* kPolicyState = "policy/state";
// What the leader has acted on (RoundWatch::lead).
inline constexpr const char* kRequestsHandled = "ctl/handled";
inline constexpr const char* kReleaseDone = "ctl/release_done";
inline constexpr const char* kRound = "round";  // the round open for joining
inline constexpr const char* kFailures = "failures";
inline constexpr const char* kJobFinished = "job/finished";  // JobFinished
// health::ExclusionState: every node's faults and exclusions (JSON), updated
// with COMPARE_SET by whoever records a fault, excludes or readmits a node.
inline constexpr const char* kNodeHealth = "health/nodes";
// health::RestartState: the restart policy's counts, continued by whichever
// closer counts the next failure.
inline constexpr const char* kRestartState = "health/restarts";
// HostList (host_list.hpp): the hosts --host-discovery-script allowed at
// its last run, as the closer or leader that ran it saw them.
inline constexpr const char* kAllowedHosts = "hosts/allowed";
std::string heartbeat(const std::string& node_id);  // HeartbeatRecord
std::string memory(const std::string& node_id);     // MemoryHoldings
// ADD: raised by every publication of a MemoryHoldings, so that a reader
// polling for changes reads one key, not every member's.
inline constexpr const char* kMemoryGeneration = "mem-generation";
// "r/<n>/<name>": a key of round n.
std::string round_key(uint64_t round, const std::string& name);
// "rec/<index>" (a name for round_key): the JoinRecord of arrival index.
std::string join_record(int64_t index);
// "assign/<closer>/<index>" (a name for round_key): the Placement of
// arrival index `index`, written by the agent of arrival index `closer`
// before it closed the round. Keyed by closer so that a closer that lost
// the race to close writes only keys nobody reads.
std::string assignment(int64_t closer, int64_t index);

// The other keys of round n, each named once.
std::string join(uint64_t round, int64_t index);  // round_key(round, join_record(index))
std::string placement(uint64_t round, int64_t closer, int64_t index);  // ... assignment(...)
std::string arrivals(uint64_t round);  // ADD: arrival indices handed out
std::string closed(uint64_t round);    // Closed or ClosedWithout
// MemberList, written by the closer of arrival index `closer` before it
// closed the round (as its placements): a closer that dies between its
// COMPARE_SET of `closed` and any later write leaves a round whose members
// can still be read.
std::string members(uint64_t round, int64_t closer);
std::string master(uint64_t round);                   // MasterAddress
std::string target(uint64_t round);                   // RoundTarget, set by the round before's end
std::string end(uint64_t round);                      // EndRecord
std::string survivor_count(uint64_t round);           // ADD: survivor indices handed out
std::string survivor(uint64_t round, int64_t index);  // node id of survivor `index`
std::string counted(uint64_t round);                  // who counted the round before's failure
std::string leaving(uint64_t round);                  // ADD: members that announced they leave
// A graceful leave's memory handoff (Rendezvous::offer_memory): ADD, the
// offers of round n's leavers; offer i (the node id of a leaver that serves
// its memory tier, or "-": one that does not); ADD, the members of round
// n+1 that restored since.
std::string handoff_count(uint64_t round);
std::string handoff(uint64_t round, int64_t index);
std::string handoff_taken(uint64_t round);
std::string done(uint64_t round);           // ADD: the exit barrier
std::string stop_max_step(uint64_t round);  // the highest step posted (decimal)
std::string stop_max_rate(uint64_t round);  // the fastest step rate posted (millihertz)
std::string stop_posted(uint64_t round);    // ADD: members that posted
std::string stop_step(uint64_t round);      // the agreed stop step (decimal)
// "full" when the restart policy made this round a full-job restart;
// absent otherwise. Written before `closed`.
std::string restart_mode(uint64_t round);
}  // namespace keys

// What an agent writes when it joins (keys::join_record): everything the
// closer needs to order and place it, one field per line.
struct JoinRecord {
  std::string node_id;
  std::string host;
  int local_world_size = 1;
  int64_t prev_round = 0;  // 0: never admitted
  int prev_rank = -1;
  bool released = false;

  std::string serialize() const;
  static JoinRecord parse(const std::string& text);
  static std::optional<JoinRecord> try_parse(const std::string& text);
};

// A candidate's place in a closed round (keys::assignment):
// "ok <group_rank> <group_world_size> <rank_offset> <world_size> <leader>",
// or "spare" when the round closed without it.
struct Placement {
  bool admitted = false;
  int group_rank = 0;
  int group_world_size = 0;
  int rank_offset = 0;
  int world_size = 0;
  std::string leader_node_id;

  std::string serialize() const;
  static Placement parse(const std::string& text);
  static std::optional<Placement> try_parse(const std::string& text);
};

// The value of a round's `closed` key when the round admitted candidates:
// "<candidates> <closer>" (arrival indices 1..candidates were considered;
// the agent of arrival index closer closed it). nullopt for a
// ClosedWithout or anything malformed.
struct Closed {
  int64_t candidates = 0;
  int64_t closer = 0;
  std::string serialize() const;
  static std::optional<Closed> parse(const std::string& value);
};

// The `closed` value of a round that admitted nobody: "fail <why>" (too few
// agents joined in time; they may try the next round) or "failjob <why>"
// (the job failed: its restarts are spent).
struct ClosedWithout {
  bool job_failed = false;
  std::string why;
  std::string serialize() const;
  static std::optional<ClosedWithout> parse(const std::string& value);
};

// Why a round ended (the value of its `end` key).
enum class EndKind { kScaleUp, kScaleDown, kReplace, kRestart, kFail, kDone };
const char* to_string(EndKind k);

// "<kind> <target> <survivors> <wait_ms> <release> <reason...>"
struct EndRecord {
  EndKind kind = EndKind::kRestart;
  int target = 0;  // members the next round aims for
  // Members of this round expected back in the next (not leaving, lost or
  // released): the next round waits for all of them before it closes, so
  // that they keep their places ahead of spares and released nodes.
  int survivors = 0;
  Millis wait{0};   // how long the next round waits for them
  int release = 0;  // the highest `release` group ranks leave the job
  std::string reason;

  std::string serialize() const;
  static EndRecord parse(const std::string& text);  // throws StoreError
  static std::optional<EndRecord> try_parse(const std::string& text);
};

// What the end of round n tells round n + 1 (keys::target of n + 1):
// "<target> <survivors> <wait_ms>", from the EndRecord that won.
struct RoundTarget {
  int target = 0;
  int survivors = 0;
  Millis wait{0};

  static RoundTarget of(const EndRecord& end);
  std::string serialize() const;
  static RoundTarget parse(const std::string& text);
};

// Where the workers of a round find their store (keys::master): "<host> <port>".
struct MasterAddress {
  std::string host;
  int port = 0;
  std::string serialize() const;
  static MasterAddress parse(const std::string& text);
};

// keys::memory: what a node's memory tier holds (docs/memory-tier.md), set by
// its agent whenever its workers are gone and by its replicator while they
// run, and where its peers fetch it: "<host> <port> <step> <snapshot
// name>..." (step 0 and no name: nothing), a name that came from a peer
// (a replica, a restore's fetch) written "+<name>".
struct MemoryHoldings {
  std::string host;
  int port = 0;
  int64_t step = 0;
  std::vector<std::string> snapshots;  // all, fetched ones included
  std::vector<std::string> fetched;    // those of them that came from a peer
  // The round after whose restore (or at whose end) the node published
  // them; 0 before its first round. A round's replicator reads holdings
  // of an earlier round as not yet known: the node may still be removing
  // the snapshots newer than the round's restore.
  uint64_t round = 0;
  std::string serialize() const;
  static std::optional<MemoryHoldings> try_parse(const std::string& text);
};

// keys::kJobFinished: "ok <why>" or "fail <why>".
struct JobFinished {
  bool failed = false;
  std::string reason;
  std::string serialize() const;
  // Anything that does not start with "fail" counts as finished, as the
  // agents have always read it.
  static JobFinished parse(const std::string& text);
};

// keys::members: the members of a closed round in group-rank order, one a
// line, "<node_id> <host>" (the host is what a node is excluded by; a line
// of a node id alone, from an older agent, has no host).
struct Member {
  std::string node_id;
  std::string host;
};
std::string serialize_members(const std::vector<Member>& members);
std::vector<Member> parse_member_list(const std::string& text);
// Their node ids alone.
std::vector<std::string> parse_members(const std::string& text);

// keys::heartbeat: "<unix_ms> <step> <compute_us> <samples_per_s> <steps>".
// The time is wall-clock milliseconds since the epoch, so that any agent
// can judge another's at once, without watching it for a while first.
// Hosts' clocks must agree to well within the limit (NTP does), as with
// torchrun's c10d rendezvous, whose heartbeats are timestamps too. The
// node's progress rides along: for the leader's straggler monitor, the
// highest step its workers published and the slowest of their last compute
// times (the SDK's compute()); for elasticctl watch and status, the ranks'
// summed samples per second ("-" when none report it) and each local
// rank's step, comma-separated ("-" before the workers start). A beat of
// the time alone (an older agent) reads as step -1, compute 0; one of three
// fields, as no samples and no rank steps.
struct HeartbeatRecord {
  int64_t unix_ms = 0;
  int64_t step = -1;
  uint32_t compute_us = 0;
  std::optional<double> samples_per_s;
  std::vector<int64_t> rank_steps;  // by local rank; -1: no step yet
  // A beat of the time alone (the one a join record comes with).
  static HeartbeatRecord at(int64_t unix_ms);
  std::string serialize() const;
  static std::optional<HeartbeatRecord> try_parse(const std::string& text);
};

// A decimal the protocol wrote; StoreError naming `what` otherwise.
int64_t parse_decimal(const std::string& text, const std::string& what);

}  // namespace elasticrun::rendezvous
