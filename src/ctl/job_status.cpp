#include "ctl/job_status.hpp"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <sstream>

#include "health/exclusion.hpp"
#include "rendezvous/records.hpp"

namespace elasticrun::ctl {
namespace {

namespace keys = rendezvous::keys;
using rendezvous::JoinRecord;

std::optional<int64_t> to_int(const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

// The values of `keys`, nullopt for those absent. One CHECK and one
// MULTI_GET without a wait when all exist (the usual case); a CHECK per key
// otherwise, since one CHECK says only whether all exist. The reads do not
// wait: a key that goes between the CHECK and the read (a heartbeat whose
// etcd lease expired, a round's keys being deleted) reads as "" and counts
// as absent, as every record read here is non-empty when written.
std::vector<std::optional<std::string>> read_present(StoreClient& c,
                                                     const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> out(keys.size());
  if (keys.empty()) return out;
  std::vector<size_t> present;
  if (c.check(keys)) {
    for (size_t i = 0; i < keys.size(); ++i) present.push_back(i);
  } else {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (c.check({keys[i]})) present.push_back(i);
    }
  }
  if (present.empty()) return out;
  std::vector<std::string> names;
  for (size_t i : present) names.push_back(keys[i]);
  auto values = c.multi_get_present(names);
  for (size_t j = 0; j < present.size(); ++j) {
    if (!values[j].empty()) out[present[j]] = std::move(values[j]);
  }
  return out;
}

std::optional<std::string> read_one(StoreClient& c, const std::string& key) {
  return read_present(c, {key})[0];
}

// A join record as status shows it; one it cannot parse (written by
// another version) shows its first line as the node id.
AgentInfo agent_info(const std::string& text) {
  AgentInfo a;
  if (const auto r = JoinRecord::try_parse(text)) {
    a.node_id = r->node_id;
    a.host = r->host;
    a.local_world_size = r->local_world_size;
    a.released = r->released;
  } else {
    a.node_id = text.substr(0, text.find('\n'));
  }
  return a;
}

// The keys key(1)..key(count), those present.
template <typename Key>
std::vector<std::optional<std::string>> read_records(StoreClient& c, int64_t count, Key key) {
  std::vector<std::string> names;
  for (int64_t i = 1; i <= count; ++i) names.push_back(key(i));
  return read_present(c, names);
}

void read_members(StoreClient& c, JobStatus& s) {
  const uint64_t round = *s.round;
  const auto closed = rendezvous::Closed::parse(s.closed);
  if (!closed) return;  // "fail ...": nobody was admitted
  const auto recs =
      read_records(c, closed->candidates, [&](int64_t i) { return keys::join(round, i); });
  const auto assigns = read_records(
      c, closed->candidates, [&](int64_t i) { return keys::placement(round, closed->closer, i); });
  for (size_t i = 0; i < assigns.size(); ++i) {
    if (!assigns[i] || !recs[i]) continue;
    const auto p = rendezvous::Placement::try_parse(*assigns[i]);
    if (!p || !p->admitted) continue;
    MemberInfo m;
    m.group_rank = p->group_rank;
    m.rank_offset = p->rank_offset;
    m.agent = agent_info(*recs[i]);
    s.world_size = p->world_size;
    s.members.push_back(std::move(m));
  }
  if (!s.members.empty()) {
    std::sort(s.members.begin(), s.members.end(),
              [](const MemberInfo& a, const MemberInfo& b) { return a.group_rank < b.group_rank; });
    return;
  }
  if (auto list = read_one(c, keys::members(round, closed->closer))) {
    int rank = 0;
    for (auto& member : rendezvous::parse_member_list(*list)) {
      MemberInfo m;
      m.agent.node_id = member.node_id;
      m.agent.host = member.host;
      m.group_rank = rank++;
      s.members.push_back(std::move(m));
    }
  }
}

void read_beats(StoreClient& c, JobStatus& s) {
  std::vector<std::string> names;
  for (const auto& m : s.members) names.push_back(keys::heartbeat(m.agent.node_id));
  const auto beats = read_present(c, names);
  for (size_t i = 0; i < beats.size(); ++i) {
    if (beats[i]) s.members[i].beat = rendezvous::HeartbeatRecord::try_parse(*beats[i]);
  }
}

void read_recent(StoreClient& c, JobStatus& s) {
  const uint64_t last = *s.round;
  const uint64_t first = last > kRecentRounds ? last - kRecentRounds + 1 : 1;
  std::vector<std::string> names;
  for (uint64_t r = first; r < last; ++r) names.push_back(keys::end(r));
  const auto ends = read_present(c, names);
  for (size_t i = 0; i < ends.size(); ++i) {
    if (!ends[i]) continue;  // a round that never formed
    if (auto e = rendezvous::EndRecord::try_parse(*ends[i])) s.recent.push_back({first + i, *e});
  }
  if (s.end) s.recent.push_back({last, *s.end});
}

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string ranks_text(const MemberInfo& m) {
  if (m.rank_offset < 0 || m.agent.local_world_size < 1) return "?";
  if (m.agent.local_world_size == 1) return std::to_string(m.rank_offset);
  return std::to_string(m.rank_offset) + "-" +
         std::to_string(m.rank_offset + m.agent.local_world_size - 1);
}

// The listed hosts, `host[:slots]`, the first few of a long list.
std::string allowed_text(const rendezvous::HostList& list) {
  constexpr size_t kShown = 8;
  std::string out = plural(static_cast<int64_t>(list.hosts.size()), "host", "hosts");
  for (size_t i = 0; i < list.hosts.size() && i < kShown; ++i) {
    const auto& h = list.hosts[i];
    out += (i == 0 ? ": " : ", ") + h.host + (h.slots ? ":" + std::to_string(*h.slots) : "");
  }
  if (list.hosts.size() > kShown) out += ", ...";
  return out;
}

std::string or_unknown(const std::string& s) {
  return s.empty() ? "?" : s;
}

// Rows of cells, left-aligned in columns two spaces apart.
std::string columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string end_text(const rendezvous::EndRecord& e) {
  std::string t = std::string(rendezvous::to_string(e.kind)) + ", next round " +
                  plural(e.target, "node", "nodes");
  if (!e.reason.empty()) t += ": " + e.reason;
  return t;
}

std::string ago(std::chrono::milliseconds since_epoch, std::chrono::system_clock::time_point now) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) - since_epoch;
  if (ms.count() < 0) return "just now";
  return std::to_string(ms.count() / 1000) + " s ago";
}

}  // namespace

std::string JobStatus::state() const {
  if (finished) return rendezvous::JobFinished::parse(*finished).failed ? "failed" : "finished";
  if (!round) return "forming";
  if (!rendezvous::Closed::parse(closed)) return "not formed";
  if (end) return "ending";
  return "running";
}

JobStatus read_status(StoreClient& c, const JobAddress& job) {
  JobStatus s;
  s.job = job;
  const std::string open = c.get(keys::kRound);
  const auto open_round = to_int(open);
  if (!open_round || *open_round < 1) {
    throw StoreError("job '" + job.run_id + "' on " + job.endpoint() + ": malformed round '" +
                     open + "'");
  }
  s.open_round = static_cast<uint64_t>(*open_round);
  s.joined = to_int(read_one(c, keys::arrivals(s.open_round)).value_or("0")).value_or(0);
  for (auto& rec :
       read_records(c, s.joined, [&](int64_t i) { return keys::join(s.open_round, i); })) {
    if (rec) s.waiting.push_back(agent_info(*rec));
  }
  if (s.open_round > 1) {
    s.round = s.open_round - 1;
    s.closed = read_one(c, keys::closed(*s.round)).value_or("");
    read_members(c, s);
    // One written by an agent of another version is left out; the rest shows.
    if (auto end = read_one(c, keys::end(*s.round))) s.end = rendezvous::EndRecord::try_parse(*end);
    read_beats(c, s);
    read_recent(c, s);
  }
  s.restarts = to_int(read_one(c, keys::kFailures).value_or("0")).value_or(0);
  s.finished = read_one(c, keys::kJobFinished);
  s.policy_text = read_one(c, keys::kPolicyState);
  if (s.policy_text) {
    try {
      s.policy = elastic::PolicyState::parse(*s.policy_text);
    } catch (const ConfigError&) {
      // Shown as text.
    }
  }
  if (auto health = read_one(c, keys::kNodeHealth)) {
    try {
      const auto state = health::ExclusionState::parse(*health);
      const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
      for (const auto& [host, n] : state.excluded_at(now)) {
        s.excluded.push_back({host, n.excluded_until_ms, n.exclusions, n.reason});
      }
    } catch (const ConfigError&) {
      // Written by an agent of another version: shown without.
    }
  }
  if (auto hosts = read_one(c, keys::kAllowedHosts)) {
    try {
      s.allowed_hosts = rendezvous::HostList::parse(*hosts);
    } catch (const ConfigError&) {
      // Not an agent's list: shown without.
    }
  }
  s.requests = to_int(read_one(c, keys::kRequestSeq).value_or("0")).value_or(0);
  s.handled = to_int(read_one(c, keys::kRequestsHandled).value_or("0")).value_or(0);
  return s;
}

std::string format_table(const JobStatus& s, std::chrono::system_clock::time_point now) {
  std::string out = "job '" + s.job.run_id + "' on " + s.job.endpoint() + ": " + s.state() + "\n";
  std::vector<std::vector<std::string>> rows;
  if (s.round) {
    std::string r = std::to_string(*s.round) + ": ";
    if (!rendezvous::Closed::parse(s.closed)) {
      const auto without = rendezvous::ClosedWithout::parse(s.closed);
      r += "closed without members: " + (without ? without->why : s.closed);
    } else {
      r += plural(static_cast<int64_t>(s.members.size()), "node", "nodes") + ", world size " +
           (s.world_size < 0 ? "?" : std::to_string(s.world_size));
    }
    rows.push_back({"round", r});
    if (s.end) rows.push_back({"ended", end_text(*s.end)});
  }
  rows.push_back({"open round", std::to_string(s.open_round) + ": " +
                                    plural(s.joined, "agent", "agents") + " joined"});
  rows.push_back({"restarts", std::to_string(s.restarts)});
  if (s.policy) {
    std::string p =
        s.policy->cap ? "size limit " + plural(*s.policy->cap, "node", "nodes") : "no size limit";
    p += ", backoff level " + std::to_string(s.policy->backoff_level);
    if (s.policy->last_event) p += ", last scale event " + ago(*s.policy->last_event, now);
    rows.push_back({"policy", p});
  } else if (s.policy_text) {
    rows.push_back({"policy", *s.policy_text});
  }
  if (s.requests > 0) {
    rows.push_back({"requests", std::to_string(s.requests) + " submitted, " +
                                    std::to_string(s.handled) + " handled"});
  }
  if (s.allowed_hosts) rows.push_back({"listed", allowed_text(*s.allowed_hosts)});
  if (s.finished) rows.push_back({"finished", *s.finished});
  out += columns(rows);
  if (!s.excluded.empty()) {
    std::vector<std::vector<std::string>> table = {{"HOST", "BACK IN", "TIMES", "WHY"}};
    const auto now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    for (const auto& e : s.excluded) {
      table.push_back(
          {e.host, std::to_string(std::max<int64_t>(0, (e.until_unix_ms - now_ms) / 1000)) + " s",
           std::to_string(e.exclusions), e.reason});
    }
    out += "\nexcluded nodes (elasticctl readmit --host HOST lets one back):\n" + columns(table);
  }

  if (!s.members.empty()) {
    std::vector<std::vector<std::string>> table = {{"GROUP RANK", "RANKS", "HOST", "STEP", "NODE"}};
    for (const auto& m : s.members) {
      const std::string step =
          m.beat && m.beat->step >= 0 ? std::to_string(m.beat->step) : std::string("-");
      table.push_back({std::to_string(m.group_rank), ranks_text(m), or_unknown(m.agent.host), step,
                       or_unknown(m.agent.node_id)});
    }
    out += "\nmembers of round " + std::to_string(*s.round) + ":\n" + columns(table);
  }
  if (!s.waiting.empty()) {
    std::vector<std::vector<std::string>> table = {{"", "HOST", "NODE"}};
    for (const auto& a : s.waiting) {
      // An agent on a host the discovery script does not list waits there.
      const bool unlisted = s.allowed_hosts && !s.allowed_hosts->admits(a.host, a.local_world_size);
      table.push_back({a.released ? "released"
                       : unlisted ? "unlisted"
                                  : "joined",
                       or_unknown(a.host), or_unknown(a.node_id)});
    }
    out += "\nagents in open round " + std::to_string(s.open_round) + ":\n" + columns(table);
  }
  return out;
}

std::string format_json(const JobStatus& s) {
  using nlohmann::ordered_json;
  auto agent = [](const AgentInfo& a) {
    return ordered_json{{"node_id", a.node_id},
                        {"host", a.host},
                        {"local_world_size", a.local_world_size},
                        {"released", a.released}};
  };
  ordered_json members = ordered_json::array();
  for (const auto& m : s.members) {
    ordered_json j = {{"group_rank", m.group_rank}};
    j.update(agent(m.agent));
    j["rank_offset"] = m.rank_offset;
    // Each rank's step, from the node's heartbeat.
    if (m.beat) {
      j["last_beat_unix_ms"] = m.beat->unix_ms;
      j["step"] = m.beat->step;
      j["steps"] = m.beat->rank_steps;
      j["samples_per_s"] =
          m.beat->samples_per_s ? ordered_json(*m.beat->samples_per_s) : ordered_json(nullptr);
    } else {
      j["last_beat_unix_ms"] = nullptr;
      j["step"] = nullptr;
      j["steps"] = ordered_json::array();
      j["samples_per_s"] = nullptr;
    }
    members.push_back(std::move(j));
  }
  ordered_json waiting = ordered_json::array();
  for (const auto& a : s.waiting) waiting.push_back(agent(a));
  auto end_json = [](const rendezvous::EndRecord& e) {
    return ordered_json{{"kind", rendezvous::to_string(e.kind)},
                        {"target", e.target},
                        {"survivors", e.survivors},
                        {"release", e.release},
                        {"reason", e.reason}};
  };
  ordered_json end = nullptr;
  if (s.end) end = end_json(*s.end);
  ordered_json recent = ordered_json::array();
  for (const auto& r : s.recent) {
    ordered_json j = {{"round", r.round}};
    j.update(end_json(r.end));
    recent.push_back(std::move(j));
  }
  ordered_json excluded = ordered_json::array();
  for (const auto& e : s.excluded) {
    excluded.push_back({{"host", e.host},
                        {"until_unix_ms", e.until_unix_ms},
                        {"exclusions", e.exclusions},
                        {"reason", e.reason}});
  }
  ordered_json allowed = nullptr;
  if (s.allowed_hosts) {
    allowed = ordered_json::array();
    for (const auto& h : s.allowed_hosts->hosts) {
      allowed.push_back(
          {{"host", h.host}, {"slots", h.slots ? ordered_json(*h.slots) : ordered_json(nullptr)}});
    }
  }
  ordered_json finished = nullptr;
  if (s.finished) {
    const auto f = rendezvous::JobFinished::parse(*s.finished);
    finished = {{"ok", !f.failed}, {"reason", f.reason}};
  }
  ordered_json policy = nullptr;
  if (s.policy_text) {
    policy = {{"state", *s.policy_text}};
    if (s.policy) {
      policy["size_limit"] = s.policy->cap ? ordered_json(*s.policy->cap) : ordered_json(nullptr);
      policy["backoff_level"] = s.policy->backoff_level;
      policy["last_event_unix_ms"] = s.policy->last_event
                                         ? ordered_json(s.policy->last_event->count())
                                         : ordered_json(nullptr);
    }
  }
  const ordered_json j = {
      {"run_id", s.job.run_id},
      {"endpoint", s.job.endpoint()},
      {"state", s.state()},
      {"round", s.round ? ordered_json(*s.round) : ordered_json(nullptr)},
      {"closed", s.round ? ordered_json(s.closed) : ordered_json(nullptr)},
      {"nodes", s.members.size()},
      {"world_size", s.world_size < 0 ? ordered_json(nullptr) : ordered_json(s.world_size)},
      {"members", std::move(members)},
      {"end", std::move(end)},
      {"recent_rounds", std::move(recent)},
      {"open_round", s.open_round},
      {"joined", s.joined},
      {"waiting", std::move(waiting)},
      {"restarts", s.restarts},
      {"finished", std::move(finished)},
      {"policy", std::move(policy)},
      {"requests", {{"submitted", s.requests}, {"handled", s.handled}}},
      {"excluded", std::move(excluded)},
      {"allowed_hosts", std::move(allowed)},
  };
  return j.dump(2) + "\n";
}

}  // namespace elasticrun::ctl
