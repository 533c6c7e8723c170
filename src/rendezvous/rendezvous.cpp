#include "rendezvous/rendezvous.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <thread>

#include "etcd/etcd_backend.hpp"
#include "events/types.hpp"
#include "rendezvous/heartbeat.hpp"
#include "util/deadline.hpp"
#include "util/logging.hpp"
#include "util/strings.hpp"

namespace elasticrun::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using util::seconds_text;

}  // namespace

// A join record as the closer sees it: where it arrived, and whether its
// heartbeat had stopped by the time the round closed.
struct Rendezvous::Candidate {
  JoinRecord record;
  int64_t index = 0;
  bool dead = false;
  bool excluded = false;  // its host is excluded (health::ExclusionState)
  bool unlisted = false;  // the host discovery script does not list its host
};

StoreClient connect_store(const RendezvousConfig& c, Millis connect_timeout, Millis timeout,
                          Millis key_ttl) {
  StoreClientOptions o;
  o.key_prefix = keys::prefix(c.run_id);
  o.connect_timeout = connect_timeout;
  o.timeout = timeout;
  if (c.etcd) {
    o.key_ttl = key_ttl;
    return etcd::connect(*c.etcd, o);
  }
  o.secret = c.secret;
  if (!c.standby_host.empty()) {
    o.standbys.emplace_back(c.standby_host, static_cast<uint16_t>(c.standby_port));
  }
  return StoreClient::connect(c.store_host, static_cast<uint16_t>(c.store_port), o);
}

Rendezvous::Rendezvous(RendezvousConfig config)
    : config_(std::move(config)),
      client_(connect_store(config_, config_.store_timeout, config_.store_timeout)) {}

Rendezvous::~Rendezvous() = default;

void Rendezvous::check_cancelled() const {
  if (cancelled_.load())
    throw RendezvousClosed(false, "rendezvous cancelled: the agent is stopping");
}

Assignment Rendezvous::join(bool released) {
  auto log = util::logger("rendezvous");
  // COMPARE_SET on an absent key with expected "" creates it: the first
  // agent of a job opens round 1. Read first: every other agent finds the
  // key, and a read is no write (on etcd, no proposal to replicate).
  std::string open_round = client_.get_present(keys::kRound);
  if (open_round.empty()) open_round = client_.compare_set(keys::kRound, "", "1");
  uint64_t round = static_cast<uint64_t>(parse_decimal(open_round, "round"));
  for (bool first = true;; first = false) {
    check_cancelled();
    // An agent that has never been admitted skips this read on its first
    // try: when it joins a finished job, its wait for the round notices
    // within a heartbeat interval. One request less per agent at start.
    if (auto done = first && !last_ ? std::nullopt : job_finished()) {
      throw RendezvousClosed(
          done->first,
          "the job has " + std::string(done->first ? "failed" : "finished") + ": " + done->second);
    }
    bool spare = false;
    Assignment a = join_round(round, released, spare);
    if (!spare) {
      last_ = a;
      log->info("round {}: admitted as group rank {} of {} (world size {})", a.round, a.group_rank,
                a.group_world_size, a.world_size);
      return a;
    }
    log->info("round {} closed without this node: waiting as a spare for round {}", round,
              round + 1);
    ++round;
  }
}

Assignment Rendezvous::join_round(uint64_t round, bool released, bool& spare) {
  JoinRecord me;
  me.node_id = config_.node_id;
  me.host = config_.host;
  me.local_world_size = config_.local_world_size;
  if (last_) {
    me.prev_round = static_cast<int64_t>(last_->round);
    me.prev_rank = last_->group_rank;
  }
  me.released = released;
  const int64_t index = client_.add(keys::arrivals(round), 1);
  // Joining is a sign of life: the closer reads every candidate's heartbeat,
  // which must exist even before this agent's heartbeat thread first beats.
  // One request sets both, so whoever sees the record sees the heartbeat.
  client_.multi_set({keys::join(round, index), keys::heartbeat(config_.node_id)},
                    {me.serialize(), HeartbeatRecord::at(now_unix_ms()).serialize()});
  if (me.prev_round > 0 && me.prev_round == static_cast<int64_t>(round) - 1 && !released) {
    // Survivors also take a survivor index, so that the closer can wait for
    // all of them by waiting on one key.
    const int64_t s = client_.add(keys::survivor_count(round), 1);
    client_.set(keys::survivor(round, s), config_.node_id);
  }
  if (round > 1 && !client_.check({keys::target(round)})) {
    util::logger("rendezvous")
        ->info("round {} opens when the running round ends: this node waits as a spare", round);
  }
  if (index == 1) close_round(round, index);
  wait_for_close(round, index);

  // `closed` is set by now, and the closer wrote the assignments before it.
  // The closer is the first arrival unless it died: read our assignment
  // from it in the same request, and again if another agent closed.
  const auto got =
      client_.multi_get_present({keys::closed(round), keys::placement(round, 1, index)});
  const std::string& closed_value = got[0];
  if (const auto without = ClosedWithout::parse(closed_value)) {
    if (without->job_failed) throw RendezvousClosed(true, "the job failed: " + without->why);
    throw TimeoutError("rendezvous round " + std::to_string(round) + " of run '" + config_.run_id +
                       "' failed: " + without->why);
  }
  const auto closed = Closed::parse(closed_value);
  if (!closed) throw StoreError("rendezvous: malformed closed record '" + closed_value + "'");
  spare = true;
  if (index > closed->candidates) return {};
  const Placement p = Placement::parse(
      closed->closer == 1 ? got[1]
                          : client_.get_present(keys::placement(round, closed->closer, index)));
  if (!p.admitted) return {};
  Assignment a;
  a.round = round;
  a.group_rank = p.group_rank;
  a.group_world_size = p.group_world_size;
  a.rank_offset = p.rank_offset;
  a.world_size = p.world_size;
  a.leader_node_id = p.leader_node_id;
  // Written before `closed` by the closer that counted the failure.
  a.full_restart = round > 1 && client_.check({keys::restart_mode(round)});
  spare = false;
  return a;
}

// Waits up to `budget` for `key`, one heartbeat interval at a time, between
// which it notices a cancelled agent and a job that ended. True when the key
// exists. `also`, when given, is read in the same request as the job's end
// after each interval, into *also_value ("" when not set): what a waiter
// checks between intervals costs one request, which matters where
// thousands of agents wait on etcd.
bool Rendezvous::wait_while_running(const std::string& key, Millis budget, const char* while_what,
                                    const std::string& also, std::string* also_value) {
  const auto until = Clock::now() + budget;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(until - Clock::now());
    if (left <= Millis(0)) return client_.check({key});
    try {
      client_.wait({key}, std::min(left, config_.heartbeat_interval));
      return true;
    } catch (const TimeoutError&) {
    }
    check_cancelled();
    // A key that is not set reads as "" (elasticrun's store, etcd), and
    // no job's end record is empty.
    const auto got = client_.multi_get_present({keys::kJobFinished, also.empty() ? key : also});
    if (!got[0].empty()) {
      const JobFinished f = JobFinished::parse(got[0]);
      throw RendezvousClosed(f.failed, std::string("the job ended while this node ") +
                                           while_what + ": " + f.reason);
    }
    if (also_value) *also_value = got[1];
  }
}

// Waits for the round's `closed` key. The closer is the first arrival; if
// its heartbeat stops while we wait, we close the round ourselves (the
// COMPARE_SET on `closed` lets exactly one closer win).
void Rendezvous::wait_for_close(uint64_t round, int64_t my_index) {
  const std::string closed_key = keys::closed(round);
  std::string closer_hb, beat;
  const auto stale_after = config_.heartbeat_interval * config_.missed_heartbeats;
  for (;;) {
    if (wait_while_running(closed_key, config_.heartbeat_interval, "waited to join", closer_hb,
                           &beat)) {
      return;
    }
    if (my_index == 1) continue;  // we are the closer (a spare waiting for the round to open)
    if (closer_hb.empty()) {
      closer_hb = keys::heartbeat(JoinRecord::parse(client_.get(keys::join(round, 1))).node_id);
      beat = client_.get_present(closer_hb);
    }
    if (heartbeat_stale(beat, now_unix_ms(), stale_after)) {
      util::logger("rendezvous")
          ->warn("round {}: the closing agent's heartbeat stopped; closing the round here", round);
      close_round(round, my_index);
    }
  }
}

void Rendezvous::close_round(uint64_t round, int64_t my_index) {
  auto log = util::logger("rendezvous");
  const auto& sizes = config_.sizes;
  const std::string count_key = keys::arrivals(round);
  auto rec_key = [&](int64_t i) { return keys::join(round, i); };
  // Waits until `n` agents have joined or `budget` passes; true when they did.
  auto wait_for = [&](int64_t n, Millis budget) {
    return wait_while_running(rec_key(n), budget, "waited to join");
  };

  int target = sizes.max_replicas;
  int lost = 0;  // members of the round before that did not come back
  if (round == 1) {
    if (wait_for(sizes.min_replicas, config_.join_timeout)) {
      if (sizes.max_replicas > sizes.min_replicas) {
        wait_for(sizes.max_replicas, config_.last_call_timeout);
      }
    }
  } else {
    // A later round opens when the round before ends; its end record says
    // how many members to expect and for how long. Spares wait here, for as
    // long as the job runs.
    const std::string target_key = keys::target(round);
    while (!wait_while_running(target_key, std::chrono::hours(24), "waited as a spare")) {
    }
    const RoundTarget t = RoundTarget::parse(client_.get(target_key));
    target = std::clamp(t.target, sizes.min_replicas, sizes.max_replicas);
    lost = wait_for_survivors(round, target, t.survivors, t.wait);
    if (client_.add(count_key, 0) < sizes.min_replicas) {
      wait_for(sizes.min_replicas, config_.join_timeout);
    }
  }

  std::vector<Candidate> recs = candidates(round);
  if (config_.hosts) recs = wait_for_listed(round, std::move(recs));
  const auto count = static_cast<int64_t>(recs.size());
  int64_t live = 0, usable = 0, unlisted = 0;
  for (const auto& c : recs) {
    live += !c.dead && !c.unlisted ? 1 : 0;
    usable += !c.dead && !c.unlisted && !c.excluded ? 1 : 0;
    unlisted += !c.dead && c.unlisted ? 1 : 0;
  }
  if (unlisted > 0) {
    std::string hosts;
    for (const auto& c : recs) {
      if (!c.dead && c.unlisted) hosts += (hosts.empty() ? "" : ", ") + c.record.host;
    }
    log->info("round {}: not admitting the agent(s) on {}: not listed by the host discovery script",
              round, hosts);
  }
  auto admit =
      elastic::largest_allowed_at_most(sizes, static_cast<int>(std::min<int64_t>(usable, target)));
  if ((!admit || usable < sizes.min_replicas) && usable < live) {
    log->warn(
        "round {}: admitting excluded node(s): only {} other agent(s) joined, at least {} "
        "needed",
        round, usable, sizes.min_replicas);
    for (auto& c : recs) c.excluded = false;
    admit =
        elastic::largest_allowed_at_most(sizes, static_cast<int>(std::min<int64_t>(live, target)));
  }
  std::optional<ClosedWithout> without;
  if (const auto spent = account_failure(round, lost)) {
    without = ClosedWithout{true, *spent};
  } else if (!admit || live < sizes.min_replicas) {
    without = ClosedWithout{
        false, std::to_string(live) + " agent(s) joined within " +
                   seconds_text(config_.join_timeout) + "; at least " +
                   std::to_string(sizes.min_replicas) + " needed" +
                   (unlisted > 0 ? " (" + std::to_string(unlisted) +
                                       " more on hosts the host discovery script does not list)"
                                 : "")};
  }
  const std::string closed_value =
      without ? without->serialize() : Closed{count, my_index}.serialize();
  // Closes the round; false when another agent closed it first.
  auto close = [&] {
    if (client_.compare_set(keys::closed(round), "", closed_value) != closed_value) return false;
    // Late arrivals from here on belong to the next round.
    client_.compare_set(keys::kRound, std::to_string(round), std::to_string(round + 1));
    return true;
  };
  if (without) {
    if (!close()) return;
    if (without->job_failed) mark_job_finished(true, without->why);
    log->error("round {}: {}", round, without->why);
    return;
  }

  // Survivors of the previous round keep their order, newcomers follow in
  // arrival order, nodes that gave their place back come last (and excluded
  // ones after them), dead and unlisted never.
  auto klass = [&](const Candidate& c) {
    if (c.dead || c.unlisted) return 4;
    if (c.excluded) return 3;
    const JoinRecord& r = c.record;
    if (r.released) return 2;
    return r.prev_round == static_cast<int64_t>(round) - 1 && r.prev_rank >= 0 ? 0 : 1;
  };
  std::stable_sort(recs.begin(), recs.end(), [&](const Candidate& a, const Candidate& b) {
    const int ka = klass(a), kb = klass(b);
    if (ka != kb) return ka < kb;
    if (ka == 0) return a.record.prev_rank < b.record.prev_rank;
    return a.index < b.index;
  });
  const int members = *admit;
  int world = 0;
  for (int i = 0; i < members; ++i) world += recs[static_cast<size_t>(i)].record.local_world_size;
  std::vector<std::string> assign_keys, assign_values;
  std::vector<Member> member_list;
  Placement p;
  p.group_world_size = members;
  p.world_size = world;
  p.leader_node_id = recs[0].record.node_id;
  for (size_t i = 0; i < recs.size(); ++i) {
    assign_keys.push_back(keys::placement(round, my_index, recs[i].index));
    p.admitted = static_cast<int>(i) < members;
    p.group_rank = static_cast<int>(i);
    assign_values.push_back(p.serialize());
    if (p.admitted) {
      p.rank_offset += recs[i].record.local_world_size;
      member_list.push_back(Member{recs[i].record.node_id, recs[i].record.host});
    }
  }
  // Assignments and the member list first, under this closer's index:
  // whoever sees `closed` finds them, even when this agent dies right after.
  assign_keys.push_back(keys::members(round, my_index));
  assign_values.push_back(serialize_members(member_list));
  client_.multi_set(assign_keys, assign_values);
  if (!close()) return;
  log->info("round {} closed: {} member(s), {} spare(s), world size {}", round, members,
            count - members, world);
}

// Every agent that joined the round so far, with what the closer must know
// of it: whether its heartbeat stopped (a spare killed while it waited:
// never admitted), whether its host is excluded, whether it is listed.
std::vector<Rendezvous::Candidate> Rendezvous::candidates(uint64_t round) {
  const int64_t count = client_.add(keys::arrivals(round), 0);
  std::vector<Candidate> recs;
  if (count == 0) return recs;
  std::vector<std::string> names;
  for (int64_t i = 1; i <= count; ++i) names.push_back(keys::join(round, i));
  // An agent writes its record right after taking its index; waiting a few
  // heartbeats covers one that is slow, and one that died in between fails
  // the close (agents then time out and start over).
  const auto stale_after = config_.heartbeat_interval * config_.missed_heartbeats;
  const auto values = client_.multi_get(names, stale_after);
  std::vector<std::string> beat_keys;
  for (int64_t i = 1; i <= count; ++i) {
    recs.push_back(Candidate{JoinRecord::parse(values[static_cast<size_t>(i - 1)]), i});
    beat_keys.push_back(keys::heartbeat(recs.back().record.node_id));
  }
  // Present reads: on etcd a dead agent's heartbeat is removed with its
  // lease, and an absent beat is a stale one.
  const auto beats = client_.multi_get_present(beat_keys);
  const health::ExclusionState excl = exclusions();
  const std::optional<HostList> listed = allowed_hosts();
  const int64_t now_ms = now_unix_ms();
  for (size_t i = 0; i < recs.size(); ++i) {
    Candidate& c = recs[i];
    c.dead = heartbeat_stale(beats[i], now_ms, stale_after);
    c.excluded = !c.dead && excl.excluded(c.record.host, now_ms);
    c.unlisted = !host_admitted(listed, c.record);
  }
  return recs;
}

// With a host discovery script, agents on unlisted hosts join but do not
// count: waits (up to the join timeout) until enough listed ones have,
// asking the script again as it goes.
std::vector<Rendezvous::Candidate> Rendezvous::wait_for_listed(uint64_t round,
                                                               std::vector<Candidate> recs) {
  // Too few joined at all: the waits before spent the join timeout already.
  if (static_cast<int64_t>(recs.size()) < config_.sizes.min_replicas) return recs;
  const auto deadline = Clock::now() + config_.join_timeout;
  bool told = false;
  for (;;) {
    int64_t listed = 0;
    for (const auto& c : recs) listed += !c.dead && !c.unlisted ? 1 : 0;
    if (listed >= config_.sizes.min_replicas || Clock::now() >= deadline) return recs;
    if (!told) {
      util::logger("rendezvous")
          ->info(
              "round {}: {} agent(s) joined, {} on hosts the host discovery script lists; "
              "waiting for at least {}",
              round, recs.size(), listed, config_.sizes.min_replicas);
      told = true;
    }
    // Wakes for a new arrival, or to ask the script again; notices a
    // cancelled agent and a job that ended meanwhile.
    wait_while_running(keys::join(round, static_cast<int64_t>(recs.size()) + 1),
                       config_.hosts->interval(), "waited for listed hosts");
    recs = candidates(round);
  }
}

std::optional<HostList> Rendezvous::allowed_hosts() {
  if (!config_.hosts) return std::nullopt;
  std::optional<HostList> list = config_.hosts->current();
  if (!list) {
    if (!client_.check({keys::kAllowedHosts})) return std::nullopt;
    try {
      return HostList::parse(client_.get(keys::kAllowedHosts));
    } catch (const ConfigError&) {
      return std::nullopt;  // not written by an agent of ours
    }
  }
  if (!published_hosts_ || !(*published_hosts_ == *list)) {
    client_.set(keys::kAllowedHosts, list->serialize());
    published_hosts_ = list;
  }
  return list;
}

bool Rendezvous::host_admitted(const std::optional<HostList>& listed, const JoinRecord& r) const {
  if (!config_.hosts) return true;
  return listed && listed->admits(r.host, r.local_world_size);
}

// Later rounds: waits until every survivor of the round before is back and
// the target is reached. Survivors are alive and only stopping their
// workers, so they get `wait`; a member whose heartbeat has stopped is lost,
// and then replacements get the faulty-scale-down timeout. Returns how many
// members were found lost.
int Rendezvous::wait_for_survivors(uint64_t round, int target, int survivors, Millis wait) {
  auto log = util::logger("rendezvous");
  const auto start = Clock::now();
  const auto rejoin_deadline = start + wait;
  std::optional<Clock::time_point> lost_at;
  std::vector<std::string> previous;
  std::set<std::string> lost;
  for (;;) {
    check_cancelled();
    const int64_t back = client_.add(keys::survivor_count(round), 0);
    const int64_t count = client_.add(keys::arrivals(round), 0);
    const int expected = survivors - static_cast<int>(lost.size());
    const auto now = Clock::now();
    if (back >= expected) {
      if (count >= target) break;
      if (lost_at && now >= *lost_at + config_.faulty_scale_down_timeout) break;
      if (!lost_at && now >= rejoin_deadline) break;
    } else if (now >= rejoin_deadline) {
      log->warn("round {}: {} of {} member(s) came back within {} ms", round, back, expected,
                wait.count());
      break;
    }
    if (back < expected) {
      // Which members of the round before are still out, and are they alive?
      if (previous.empty() && round > 1) previous = members(round - 1);
      std::set<std::string> joined;
      if (back > 0) {
        std::vector<std::string> keys;
        for (int64_t i = 1; i <= back; ++i) keys.push_back(keys::survivor(round, i));
        for (auto& id : client_.multi_get(keys)) joined.insert(id);
      }
      std::vector<std::string> out, hb;
      for (const auto& m : previous) {
        if (!joined.count(m) && !lost.count(m)) {
          out.push_back(m);
          hb.push_back(keys::heartbeat(m));
        }
      }
      if (!hb.empty()) {
        const auto beats = client_.multi_get_present(hb);
        for (size_t i = 0; i < out.size(); ++i) {
          if (heartbeat_stale(beats[i], now_unix_ms(),
                              config_.heartbeat_interval * config_.missed_heartbeats)) {
            log->warn("round {}: member {} of round {} is lost (no heartbeat)", round, out[i],
                      round - 1);
            lost.insert(out[i]);
            if (!lost_at) lost_at = Clock::now();
          }
        }
      }
    }
    // Sleep on the key that would end the wait: the last survivor's, else the target's.
    const std::string key =
        back < expected ? keys::survivor(round, expected) : keys::join(round, target);
    try {
      client_.wait({key}, config_.heartbeat_interval);
    } catch (const TimeoutError&) {
    }
  }
  return static_cast<int>(lost.size());
}

// A round that ended because a worker failed costs a restart, unless a
// member of it was lost: then the failure was the lost node's (its peers'
// collectives broke), a membership change, not a restart. Counted once per
// round, whoever closes it: the restart policy (health/restart_policy.hpp;
// without one, torchrun's --max-restarts) decides a restart in place, a
// full-job restart (recorded for the agents under keys::restart_mode), or
// the end of the job, whose reason it returns.
std::optional<std::string> Rendezvous::account_failure(uint64_t round, int lost) {
  if (round <= 1) return std::nullopt;
  const std::string end_key = keys::end(round - 1);
  if (!client_.check({end_key})) return std::nullopt;
  const EndRecord prev = EndRecord::parse(client_.get(end_key));
  if (prev.kind != EndKind::kRestart) return std::nullopt;
  auto log = util::logger("rendezvous");
  if (lost > 0) {
    log->info(
        "round {}: the failure that ended round {} follows the loss of a member: not "
        "counted against the restart limits",
        round, round - 1);
    return std::nullopt;
  }
  if (client_.compare_set(keys::counted(round), "", config_.node_id) != config_.node_id) {
    return std::nullopt;
  }
  health::RestartState state;
  if (client_.check({keys::kRestartState})) {
    try {
      state = health::RestartState::parse(client_.get(keys::kRestartState));
    } catch (const ConfigError& e) {
      log->warn("round {}: starting the restart counts again: {}", round, e.what());
    }
  }
  const std::optional<int> cap =
      config_.restart_policy ? config_.restart_cap : std::optional<int>(config_.max_restarts);
  health::RestartPolicy policy(config_.restart_policy, cap, state);
  const health::RestartDecision d = policy.on_failure(
      std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now()));
  config_.events->record(events::type::kRestartDecision, {{"round", round},
                                                          {"action", health::to_string(d.action)},
                                                          {"reason", d.reason},
                                                          {"failure", prev.reason}});
  if (d.action == health::RestartAction::kFail) {
    if (!config_.restart_policy) {
      return prev.reason + "; --max-restarts " + std::to_string(config_.max_restarts) + " spent";
    }
    return prev.reason + "; " + d.reason;
  }
  client_.set(keys::kRestartState, policy.state().serialize());
  client_.add(keys::kFailures, 1);
  if (d.action == health::RestartAction::kFullJob) {
    client_.set(keys::restart_mode(round), "full");
    log->warn("round {}: a full-job restart: {}", round, d.reason);
  } else if (config_.restart_policy) {
    log->info("round {}: a restart in place: {}", round, d.reason);
  }
  return std::nullopt;
}

// Spares are counted from their join records, which only this file reads.
int Rendezvous::live_waiting_after(uint64_t round) {
  const int64_t n = client_.add(keys::arrivals(round + 1), 0);
  if (n == 0) return 0;
  std::vector<std::string> recs;
  for (int64_t i = 1; i <= n; ++i) recs.push_back(keys::join(round + 1, i));
  std::vector<std::string> beats;
  try {
    const health::ExclusionState excl = exclusions();
    const std::optional<HostList> listed = allowed_hosts();
    const int64_t now_ms = now_unix_ms();
    for (const auto& v : client_.multi_get(recs, config_.heartbeat_interval)) {
      const JoinRecord r = JoinRecord::parse(v);
      // An excluded spare, or one on an unlisted host, is no capacity to
      // grow onto.
      if (excl.excluded(r.host, now_ms)) continue;
      if (!host_admitted(listed, r)) continue;
      beats.push_back(keys::heartbeat(r.node_id));
    }
  } catch (const TimeoutError&) {
    return 0;  // one is still writing its record: count them at the next look
  }
  if (beats.empty()) return 0;
  int alive = 0;
  const int64_t now_ms = now_unix_ms();
  for (const auto& b : client_.multi_get_present(beats)) {
    alive +=
        heartbeat_stale(b, now_ms, config_.heartbeat_interval * config_.missed_heartbeats) ? 0 : 1;
  }
  return alive;
}

}  // namespace elasticrun::rendezvous
