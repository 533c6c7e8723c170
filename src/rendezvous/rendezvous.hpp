// Dynamic rendezvous over the store: rounds, joins, closing, rank assignment,
// the end of a round, and the counters every agent shares.
//
// The protocol (docs/protocol.md, "Rendezvous") in one paragraph: the store
// keeps the number of the round open for joining. An agent joins round r by
// taking an arrival index with one ADD and writing its record under that
// index. The agent that arrived first closes the round: it waits for the
// target number of agents (or a window), reads the number of candidates,
// reads their records with one MULTI_GET, orders them
// (survivors of the round before in their old order, then newcomers by
// arrival, released nodes last), admits the largest allowed size, writes
// every candidate's assignment with one MULTI_SET and then the round's
// `closed` key. Every other agent waits on `closed` and reads its own
// assignment, which is then known to be there. A round ends when
// one agent wins the COMPARE_SET of its `end` key; the record says why and
// what the next round should aim for. Each agent costs O(1) store
// operations per round; the closer's two bulk operations carry O(agents)
// bytes.
//
// Blocking by design: the agent calls this from its own thread between
// attempts, and every call has a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "elastic/policy.hpp"
#include "elasticrun/store_client.hpp"
#include "etcd/gateway.hpp"
#include "events/event_log.hpp"
#include "health/exclusion.hpp"
#include "health/restart_policy.hpp"
#include "health/straggler.hpp"
#include "rendezvous/host_list.hpp"
#include "rendezvous/records.hpp"

namespace elasticrun::rendezvous {

struct RendezvousConfig {
  // The rendezvous store: elasticrun's (an agent's or `elasticctl store`)
  // at store_host:store_port, or an etcd cluster when `etcd` is set
  // (--rdzv-backend etcd or etcd-v2; docs/protocol.md, "etcd"), whose
  // members then replace the store and its standby.
  std::string store_host;
  int store_port = 29400;
  std::optional<etcd::EtcdOptions> etcd;
  std::string run_id = "none";
  // Unique per agent process (host-pid-random); names its heartbeat key.
  std::string node_id;
  // The address workers of other nodes reach this node at (--local-addr, else
  // the host's name); the master address when this node gets group rank 0.
  std::string host;
  int local_world_size = 1;
  // Sizes the rounds may close at (min/max replicas, step or discrete sizes).
  elastic::PolicyConfig sizes;
  // How long an agent waits for a round to admit it before giving up.
  Millis join_timeout{std::chrono::seconds(600)};
  // The first round: once the minimum has joined, how long to wait for more.
  Millis last_call_timeout{std::chrono::seconds(1)};
  // Later rounds: how long to wait for members that are expected back (they
  // are alive; they only need to stop their workers) before closing without.
  Millis rejoin_timeout{std::chrono::seconds(30)};
  // After a member is lost, how long a round waits for replacements before
  // it closes smaller (the policy's --faulty-scale-down-timeout).
  Millis faulty_scale_down_timeout{std::chrono::seconds(30)};
  // Rounds that end because a worker failed, beyond this many, fail the job
  // (torchrun's --max-restarts) when there is no restart policy.
  int max_restarts = 0;
  // HyperPod's restart policy (health/restart_policy.hpp), and the cap
  // --max-restarts adds to it when given; the closer of a round after a
  // failure applies it to the job's counts (keys::kRestartState).
  std::optional<health::RestartPolicySpec> restart_policy;
  std::optional<int> restart_cap;
  // Bad nodes (health::ExclusionState in keys::kNodeHealth): when a node's
  // faults exclude it, and for how long; the straggler monitor the leader runs.
  health::ExclusionPolicy exclusion;
  health::StragglerPolicy straggler;
  Millis heartbeat_interval{std::chrono::seconds(1)};
  int missed_heartbeats = 5;
  Millis store_timeout{std::chrono::seconds(60)};
  // Where the leader's observations and decisions, the closer's restart
  // decisions and exclusions are recorded (the agent's event log).
  events::EventLog* events = &events::EventLog::disabled();
  // --host-discovery-script's hosts (agent/host_discovery.hpp): only
  // agents on listed hosts are admitted, and a member whose host leaves
  // the list is stopped (RoundWatch). Null: every host is allowed. Give
  // the flag to every agent: whichever closes or leads a round asks it.
  HostSource* hosts = nullptr;
  // The job secret (util/secret.hpp), which the rendezvous store asks of
  // every connection when it was started with one; empty: none. Never
  // logged.
  std::string secret;
  // The rendezvous store's standby (--rdzv-conf standby_endpoint; docs/
  // protocol.md, "Standby"): an agent on that host serves it, kept equal
  // to the store, and takes over when the store's host is lost; every
  // connection moves to it then. Empty: none.
  std::string standby_host;
  int standby_port = 0;
};

// A connection of this agent to the rendezvous store, under the job's key
// prefix and with its secret, moving to the store's standby when there is
// one and the store's host is lost (on etcd: to another member when one
// fails); `timeout` bounds every call on it. `key_ttl`: on etcd, what this
// connection writes lives on a lease of that TTL (StoreClientOptions).
StoreClient connect_store(const RendezvousConfig& c, Millis connect_timeout, Millis timeout,
                          Millis key_ttl = Millis(0));

// One node's place in a closed round.
struct Assignment {
  uint64_t round = 0;
  int group_rank = 0;
  int group_world_size = 0;
  int rank_offset = 0;  // global rank of this node's local rank 0
  int world_size = 0;   // workers in the job
  // Group rank 0's node id, for followers that watch the leader's heartbeat.
  std::string leader_node_id;
  // The restart policy made this round a full-job restart: every agent
  // discards what it keeps across rounds.
  bool full_restart = false;
};

class Rendezvous {
 public:
  // Connects to the store (retrying until store_timeout). Throws NetworkError.
  explicit Rendezvous(RendezvousConfig config);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Joins the open round and returns when a round admits this node; waits as
  // a spare through rounds that do not. Throws TimeoutError when no round
  // admits it within join_timeout (the message says how many joined and how
  // many were needed), RendezvousClosed when the job finished or failed.
  // `released`: this node gave its place back (elasticctl release) and is
  // admitted only after every other candidate.
  Assignment join(bool released = false);

  // Group rank 0 publishes where its workers' store is; everyone reads it.
  void publish_master(uint64_t round, const std::string& host, int port);
  std::pair<std::string, int> master(uint64_t round);

  // Ends the round unless someone else already did; returns the record in
  // force (ours or the winner's). A round that ends with a target makes the
  // next round aim for it.
  EndRecord end_round(uint64_t round, const EndRecord& record);
  // The round's end record, waiting up to `timeout`; nullopt when still running.
  std::optional<EndRecord> wait_end(uint64_t round, Millis timeout);

  // Members of a closed round in group-rank order (node ids).
  std::vector<std::string> members(uint64_t round);
  // The same with each member's host (the key its exclusion goes by).
  std::vector<Member> member_list(uint64_t round);
  // Agents waiting to join the round after `round` (spares included).
  int waiting_after(uint64_t round);
  // The same, counting only agents whose heartbeat is fresh: a spare that
  // died while waiting must not make the job grow.
  int live_waiting_after(uint64_t round);
  // The hosts allowed now (config.hosts), published in the store when they
  // change (keys::kAllowedHosts). While this agent's script has not
  // answered yet (a leader that just took over), the list another agent
  // published. nullopt without a discovery script, or when neither is
  // known: the closer then admits no host, the leader ends no round.
  std::optional<HostList> allowed_hosts();
  // Whether an agent of record `r` may be admitted, given allowed_hosts().
  bool host_admitted(const std::optional<HostList>& listed, const JoinRecord& r) const;
  // Announce that this node leaves (spot notice); counted per round.
  void announce_leaving(uint64_t round);
  int leaving(uint64_t round);
  // The memory tier (docs/memory-tier.md): this node's holdings, set before
  // its first join and again whenever its workers are gone, so that every
  // member's is in the store when a round closes; and the members'.
  void publish_memory(const MemoryHoldings& holdings);
  // By node id, in the order given; nullopt for a node that published none.
  std::vector<std::optional<MemoryHoldings>> memory_of(const std::vector<std::string>& node_ids);
  // Raised by every publish_memory of any node: the holdings changed since
  // a reader last saw a lower value.
  int64_t memory_generation();
  // A graceful leave's memory handoff: a node that announced it leaves
  // `round`, once its workers are gone and its holdings are published, says
  // whether it serves its tier until the next round's members restored
  // (`serving`: its newest shards may be on no other node).
  void offer_memory(uint64_t round, bool serving);
  // The node ids serving their tier after leaving `round`, once every node
  // that announced it leaves offered, or `wait` passed (those that offered
  // by then).
  std::vector<std::string> memory_offers(uint64_t round, Millis wait);
  // A member of the round after `round` restored (or had nothing to
  // restore); returns how many have.
  int64_t memory_taken(uint64_t round, int64_t delta = 1);
  // The members of `round` once it closed; nullopt while it is open.
  std::optional<std::vector<std::string>> members_if_closed(uint64_t round);
  // Whether `round` ended (its end record is written).
  bool ended(uint64_t round);

  // The step at which every worker of the round stops for a voluntary
  // scale event: each of the round's `members` agents posts its node's
  // highest published step and step rate; the last to post sets the stop
  // step to the highest step plus what the fastest rank can do in `lead`
  // (plus two steps), so that the stop step is still ahead of every rank
  // when it reads it. nullopt when not every member posted within `budget`.
  std::optional<int64_t> agree_stop_step(uint64_t round, int members, int64_t local_max_step,
                                         double steps_per_s, Millis lead, Millis budget);

  // Exit barrier: this node's workers all succeeded in `round`; returns how
  // many nodes of the round have said so.
  int64_t arrive_done(uint64_t round);

  // Job-wide failure count: TORCHELASTIC_RESTART_COUNT of the workers.
  int64_t failures();

  // The job's bad-node record (empty when none was written; a malformed
  // one reads as empty, with a warning: it must not stop the job).
  health::ExclusionState exclusions();
  // Applies `change` to the record and writes it back with COMPARE_SET,
  // again on a concurrent update; `change` returns false to write nothing.
  // Returns whether it wrote.
  bool update_exclusions(const std::function<bool(health::ExclusionState&)>& change);

  // Marks the job finished (spares and late joiners exit) or failed.
  void mark_job_finished(bool failed, const std::string& reason);
  // nullopt while the job runs; else (failed, reason).
  std::optional<std::pair<bool, std::string>> job_finished();

  // The node's last assignment, if any (used as "survivor" order when rejoining).
  const std::optional<Assignment>& last() const { return last_; }
  const RendezvousConfig& config() const { return config_; }
  StoreClient& client() { return client_; }

  // Stops a blocking join() from another thread (agent shutdown): it throws
  // RendezvousClosed at its next check (within a heartbeat interval).
  void cancel() { cancelled_.store(true); }

 private:
  struct Candidate;
  Assignment join_round(uint64_t round, bool released, bool& spare);
  void close_round(uint64_t round, int64_t my_index);
  std::vector<Candidate> candidates(uint64_t round);
  std::vector<Candidate> wait_for_listed(uint64_t round, std::vector<Candidate> recs);
  int wait_for_survivors(uint64_t round, int target, int survivors, Millis wait);
  std::optional<std::string> account_failure(uint64_t round, int lost);
  void wait_for_close(uint64_t round, int64_t my_index);
  void check_cancelled() const;
  void raise_to(const std::string& key, int64_t value);
  bool wait_while_running(const std::string& key, Millis budget, const char* while_what,
                          const std::string& also = {}, std::string* also_value = nullptr);

  RendezvousConfig config_;
  StoreClient client_;
  std::optional<Assignment> last_;
  std::optional<HostList> published_hosts_;  // what allowed_hosts() last wrote
  std::atomic<bool> cancelled_{false};
};

// The job's bad-node record through any connection to its store (the
// agents', elasticctl's): what Rendezvous::exclusions and
// update_exclusions do.
health::ExclusionState read_exclusions(StoreClient& client);
bool update_exclusions(StoreClient& client,
                       const std::function<bool(health::ExclusionState&)>& change);

// The job ended (finished, failed, or the agent was cancelled) while waiting.
class RendezvousClosed : public Error {
 public:
  RendezvousClosed(bool failed, const std::string& what) : Error(what), failed_(failed) {}
  bool failed() const { return failed_; }

 private:
  bool failed_;
};

}  // namespace elasticrun::rendezvous
