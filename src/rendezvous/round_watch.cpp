#include "rendezvous/round_watch.hpp"

#include <charconv>

#include "events/types.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::rendezvous {
namespace {

elastic::TimeMs wall_now() {
  // Wall-clock milliseconds: the policy's state outlives a leader, and the
  // next leader (another host) must read the same times.
  return std::chrono::duration_cast<elastic::TimeMs>(
      std::chrono::system_clock::now().time_since_epoch());
}

// A request's node count as elasticctl wrote it; anything else (another
// program wrote the key) is ignored rather than trusted.
std::optional<int> parse_count(const std::string& text) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 1) {
    util::logger("rendezvous")->warn("ignoring a malformed scale request '{}'", text);
    return std::nullopt;
  }
  return v;
}

EndRecord to_end_record(const elastic::Decision& d, const RendezvousConfig& c) {
  EndRecord r;
  r.target = d.target;
  r.release = d.release;
  r.reason = d.reason;
  r.wait = c.rejoin_timeout;
  switch (d.action) {
    case elastic::Action::kScaleUp:
      r.kind = EndKind::kScaleUp;
      break;
    case elastic::Action::kScaleDown:
      r.kind = EndKind::kScaleDown;
      break;
    case elastic::Action::kReplace:
      r.kind = EndKind::kReplace;
      r.wait = std::max(d.wait_for_replacements, c.heartbeat_interval);
      break;
    case elastic::Action::kFail:
    case elastic::Action::kNone:
      r.kind = EndKind::kFail;
      break;
  }
  return r;
}

}  // namespace

RoundWatch::RoundWatch(const RendezvousConfig& config, WatchOptions options,
                       RoundListener& listener)
    : options_(std::move(options)),
      listener_(listener),
      rdzv_(std::make_unique<Rendezvous>(config)),
      straggler_(config.straggler) {
  thread_ = util::start_quiet_thread([this] { run(); });
}

RoundWatch::~RoundWatch() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void RoundWatch::run() {
  auto log = util::logger("rendezvous");
  const auto& c = rdzv_->config();
  const Assignment& a = options_.assignment;
  try {
    const bool leader = a.group_rank == 0;
    std::vector<Member> members;
    std::unique_ptr<elastic::Policy> policy;
    if (leader) {
      members = rdzv_->member_list(a.round);
      elastic::PolicyState state;
      if (rdzv_->client().check({keys::kPolicyState})) {
        state = elastic::PolicyState::parse(rdzv_->client().get(keys::kPolicyState));
      }
      policy = std::make_unique<elastic::Policy>(options_.policy, state);
    }
    while (!stop_.load()) {
      if (auto end = rdzv_->wait_end(a.round, c.heartbeat_interval)) {
        if (!stop_.load()) listener_.round_ended(*end);
        return;
      }
      if (stop_.load()) return;
      if (leader) {
        lead(members, *policy);
      } else {
        follow();
      }
    }
  } catch (const std::exception& e) {
    // The store is gone, unreachable or broken: this node can no longer
    // hear the others, and its workers may wait forever in a collective
    // with peers that moved on. It stops them as if the round had ended;
    // the agent's rejoin then tells whether the store is back.
    if (stop_.load()) return;
    log->error("round {}: lost the rendezvous store: {}", a.round, e.what());
    EndRecord lost;
    lost.kind = EndKind::kRestart;
    lost.reason = std::string("this node lost the rendezvous store: ") + e.what();
    listener_.round_ended(lost);
  }
}

void RoundWatch::lead(const std::vector<Member>& members, elastic::Policy& policy) {
  auto log = util::logger("rendezvous");
  const auto& c = rdzv_->config();
  const uint64_t round = options_.assignment.round;
  StoreClient& store = rdzv_->client();

  std::vector<std::string> hb_keys;
  for (const auto& m : members) hb_keys.push_back(keys::heartbeat(m.node_id));
  // A present read: an absent beat is a lost member's (on etcd, removed
  // with its lease).
  const auto beats = store.multi_get_present(hb_keys, c.heartbeat_interval * c.missed_heartbeats);
  elastic::Observation o;
  o.now = wall_now();
  o.current = static_cast<int>(members.size());
  std::string lost_names;
  const int64_t now_ms = now_unix_ms();
  const auto limit = c.heartbeat_interval * c.missed_heartbeats;
  std::vector<health::NodeSample> samples;
  for (size_t i = 0; i < members.size(); ++i) {
    if (heartbeat_stale(beats[i], now_ms, limit)) {
      ++o.lost;
      lost_names += (lost_names.empty() ? "" : ", ") + members[i].node_id;
      if (reported_lost_.insert(members[i].node_id).second) {
        c.events->record(events::type::kNodeLost,
                         {{"round", round},
                          {"node_id", members[i].node_id},
                          {"node_host", members[i].host},
                          {"silent_s", std::chrono::duration<double>(limit).count()}});
      }
    } else if (const auto beat = HeartbeatRecord::try_parse(beats[i])) {
      samples.push_back({members[i].host, beat->step, beat->compute_us});
    }
  }
  if (o.lost == 0 && end_for_straggler(samples, static_cast<int>(members.size()))) return;
  if (o.lost == 0 && end_for_unlisted(members)) return;
  o.waiting = rdzv_->live_waiting_after(round);
  o.leaving = rdzv_->leaving(round);
  if (c.events->enabled()) {
    // One more read per heartbeat interval, only for the event log's sake.
    const int excluded = static_cast<int>(rdzv_->exclusions().excluded_at(now_ms).size());
    if (o.waiting != seen_waiting_ || o.leaving != seen_leaving_ || excluded != seen_excluded_) {
      c.events->record(events::type::kWaiting, {{"round", round},
                                                {"waiting", o.waiting},
                                                {"leaving", o.leaving},
                                                {"excluded", excluded}});
      seen_waiting_ = o.waiting;
      seen_leaving_ = o.leaving;
      seen_excluded_ = excluded;
    }
  }
  // Operator requests: elasticctl writes one, then bumps ctl/seq; the
  // leader remembers in ctl/handled what it has acted on, so a new leader
  // neither misses nor repeats one. A request counts as handled only when
  // its decision took effect (nothing to do, or this leader ended the round
  // with it): if another agent ended the round first, the next leader sees
  // the request again.
  const int64_t seq = store.add(keys::kRequestSeq, 0);
  const int64_t handled = store.add(keys::kRequestsHandled, 0);
  int64_t release_total = 0, release_done = 0;
  if (seq > handled) {
    if (store.check({keys::kScaleRequest})) {
      o.scale_request = parse_count(store.get(keys::kScaleRequest));
    }
    release_total = store.add(keys::kReleaseRequest, 0);
    release_done = store.add(keys::kReleaseDone, 0);
    o.release_request = static_cast<int>(std::max<int64_t>(0, release_total - release_done));
    if (seq != seen_request_seq_) {
      seen_request_seq_ = seq;
      nlohmann::json fields = {{"round", round}, {"release", o.release_request}};
      if (o.scale_request) fields["scale"] = *o.scale_request;
      c.events->record(events::type::kOperatorRequest, std::move(fields));
    }
  }
  const elastic::PolicyState before = policy.state();
  const elastic::Decision d = policy.decide(o);
  bool took_effect = d.action == elastic::Action::kNone;
  if (!took_effect) {
    EndRecord r = to_end_record(d, c);
    r.survivors = std::max(0, o.current - o.lost - o.leaving - d.release);
    if (o.lost > 0 && d.action == elastic::Action::kReplace) {
      r.reason += " (lost: " + lost_names + ")";
    }
    log->info("round {}: ending the round: {} -> {} member(s): {}", round, to_string(r.kind),
              r.target, r.reason);
    took_effect = rdzv_->end_round(round, r).serialize() == r.serialize();
    c.events->record(events::type::kPolicyDecision, {{"round", round},
                                                     {"kind", to_string(r.kind)},
                                                     {"nodes", o.current},
                                                     {"target", r.target},
                                                     {"release", r.release},
                                                     {"lost", o.lost},
                                                     {"waiting", o.waiting},
                                                     {"leaving", o.leaving},
                                                     {"reason", r.reason},
                                                     {"took_effect", took_effect}});
  }
  if (!took_effect) return;
  if (!(policy.state() == before)) store.set(keys::kPolicyState, policy.state().serialize());
  if (seq > handled) {
    if (release_total > release_done) store.add(keys::kReleaseDone, release_total - release_done);
    store.add(keys::kRequestsHandled, seq - handled);
  }
}

// The straggler monitor's verdict excludes the node and ends the round
// without it: a waiting spare takes its place, or the job shrinks as after a
// loss. When neither can happen the node stays (ending the round would only
// readmit it, round after round). True when this ended the round.
bool RoundWatch::end_for_straggler(const std::vector<health::NodeSample>& samples, int current) {
  const auto verdict = straggler_.observe(samples);
  if (!verdict) return false;
  const auto& c = rdzv_->config();
  const uint64_t round = options_.assignment.round;
  const std::string why = "straggler: " + verdict->message;
  if (current - 1 < c.sizes.min_replicas && rdzv_->live_waiting_after(round) == 0) {
    if (!straggler_kept_) {
      util::logger("rendezvous")
          ->warn(
              "round {}: the node {} is a {}; it stays: no spare waits to take its place "
              "and the job cannot shrink below {} node(s)",
              round, verdict->host, why, c.sizes.min_replicas);
      straggler_kept_ = true;
    }
    return false;
  }
  rdzv_->update_exclusions([&](health::ExclusionState& s) {
    s.exclude(verdict->host, now_unix_ms(), c.exclusion, why);
    return true;
  });
  c.events->record(events::type::kNodeExcluded,
                   {{"round", round}, {"node_host", verdict->host}, {"reason", why}});
  EndRecord r;
  r.kind = EndKind::kReplace;
  r.target = current;
  // Every member rejoins, the straggler too (it then waits as a spare):
  // counting it keeps the next closer from closing before the others are back.
  r.survivors = current;
  r.wait = c.rejoin_timeout;
  r.reason = "the node " + verdict->host + " is excluded as a " + why;
  util::logger("rendezvous")->warn("round {}: {}; ending the round", round, r.reason);
  rdzv_->end_round(round, r);
  return true;
}

// A member whose host the discovery script no longer lists leaves at an
// agreed step, as on a graceful leave; every member rejoins (it too, to
// wait as a spare until its host is listed again), so the next closer has
// them all back at once, and a listed spare may take its place. True when
// this ended the round.
bool RoundWatch::end_for_unlisted(const std::vector<Member>& members) {
  const std::optional<HostList> listed = rdzv_->allowed_hosts();
  if (!listed) return false;
  std::string gone;
  for (const auto& m : members) {
    if (!listed->find(m.host)) gone += (gone.empty() ? "" : ", ") + m.host;
  }
  if (gone.empty()) return false;
  const auto& c = rdzv_->config();
  const uint64_t round = options_.assignment.round;
  EndRecord r;
  r.kind = EndKind::kScaleDown;
  r.target = static_cast<int>(members.size());
  r.survivors = static_cast<int>(members.size());
  r.wait = c.rejoin_timeout;
  r.reason = "the host discovery script no longer lists " + gone;
  util::logger("rendezvous")->warn("round {}: {}; ending the round", round, r.reason);
  const bool took_effect = rdzv_->end_round(round, r).serialize() == r.serialize();
  c.events->record(events::type::kPolicyDecision, {{"round", round},
                                                   {"kind", to_string(r.kind)},
                                                   {"nodes", members.size()},
                                                   {"target", r.target},
                                                   {"reason", r.reason},
                                                   {"took_effect", took_effect}});
  return true;
}

void RoundWatch::follow() {
  const auto& c = rdzv_->config();
  const Assignment& a = options_.assignment;
  const std::string beat = rdzv_->client().get_present(keys::heartbeat(a.leader_node_id));
  if (!heartbeat_stale(beat, now_unix_ms(), c.heartbeat_interval * c.missed_heartbeats)) return;
  EndRecord r;
  r.kind = EndKind::kReplace;
  r.target = a.group_world_size;
  r.survivors = a.group_world_size - 1;
  r.wait = std::max(options_.policy.faulty_scale_down_timeout, c.heartbeat_interval);
  r.reason = "the leader " + a.leader_node_id + " stopped sending heartbeats";
  util::logger("rendezvous")->warn("round {}: {}; ending the round", a.round, r.reason);
  rdzv_->end_round(a.round, r);
}

}  // namespace elasticrun::rendezvous
