#include "rendezvous/records.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "elasticrun/errors.hpp"

namespace elasticrun::rendezvous {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

std::optional<int64_t> decimal(const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

// Calls parse(text) and turns its StoreError into nullopt.
template <class T, class F>
std::optional<T> lenient(F parse) {
  try {
    return parse();
  } catch (const StoreError&) {
    return std::nullopt;
  }
}

// The first word of `text` and the rest after the spaces that follow it.
std::pair<std::string, std::string> head_and_rest(const std::string& text) {
  const size_t sp = text.find(' ');
  if (sp == std::string::npos) return {text, ""};
  const size_t rest = text.find_first_not_of(' ', sp);
  return {text.substr(0, sp), rest == std::string::npos ? "" : text.substr(rest)};
}

}  // namespace

int64_t parse_decimal(const std::string& text, const std::string& what) {
  if (auto v = decimal(text)) return *v;
  throw StoreError("rendezvous: malformed " + what + ": '" + text + "'");
}

namespace keys {
std::string prefix(const std::string& run_id) {
  return "/elasticrun/" + run_id + "/";
}
std::string heartbeat(const std::string& node_id) {
  return "hb/" + node_id;
}
std::string memory(const std::string& node_id) {
  return "mem/" + node_id;
}
std::string round_key(uint64_t round, const std::string& name) {
  return "r/" + std::to_string(round) + "/" + name;
}
std::string join_record(int64_t index) {
  return "rec/" + std::to_string(index);
}
std::string assignment(int64_t closer, int64_t index) {
  return "assign/" + std::to_string(closer) + "/" + std::to_string(index);
}
std::string join(uint64_t round, int64_t index) {
  return round_key(round, join_record(index));
}
std::string placement(uint64_t round, int64_t closer, int64_t index) {
  return round_key(round, assignment(closer, index));
}
std::string arrivals(uint64_t round) {
  return round_key(round, "count");
}
std::string closed(uint64_t round) {
  return round_key(round, "closed");
}
std::string members(uint64_t round, int64_t closer) {
  return round_key(round, "members/" + std::to_string(closer));
}
std::string master(uint64_t round) {
  return round_key(round, "master");
}
std::string target(uint64_t round) {
  return round_key(round, "target");
}
std::string end(uint64_t round) {
  return round_key(round, "end");
}
std::string survivor_count(uint64_t round) {
  return round_key(round, "sv_count");
}
std::string survivor(uint64_t round, int64_t index) {
  return round_key(round, "sv/" + std::to_string(index));
}
std::string counted(uint64_t round) {
  return round_key(round, "counted");
}
std::string leaving(uint64_t round) {
  return round_key(round, "leaving");
}
std::string handoff_count(uint64_t round) {
  return round_key(round, "handoff/count");
}
std::string handoff(uint64_t round, int64_t index) {
  return round_key(round, "handoff/" + std::to_string(index));
}
std::string handoff_taken(uint64_t round) {
  return round_key(round, "handoff/taken");
}
std::string done(uint64_t round) {
  return round_key(round, "done");
}
std::string stop_max_step(uint64_t round) {
  return round_key(round, "stop/max_step");
}
std::string stop_max_rate(uint64_t round) {
  return round_key(round, "stop/max_rate_mhz");
}
std::string stop_posted(uint64_t round) {
  return round_key(round, "stop/posted");
}
std::string stop_step(uint64_t round) {
  return round_key(round, "stop/step");
}
std::string restart_mode(uint64_t round) {
  return round_key(round, "restart_mode");
}
}  // namespace keys

std::string JoinRecord::serialize() const {
  return node_id + "\n" + host + "\n" + std::to_string(local_world_size) + "\n" +
         std::to_string(prev_round) + "\n" + std::to_string(prev_rank) + "\n" +
         (released ? "1" : "0");
}

JoinRecord JoinRecord::parse(const std::string& text) {
  const auto f = split(text, '\n');
  if (f.size() < 6) throw StoreError("rendezvous: malformed join record '" + text + "'");
  JoinRecord r;
  r.node_id = f[0];
  r.host = f[1];
  r.local_world_size = static_cast<int>(parse_decimal(f[2], "local world size"));
  r.prev_round = parse_decimal(f[3], "previous round");
  r.prev_rank = static_cast<int>(parse_decimal(f[4], "previous rank"));
  r.released = f[5] == "1";
  return r;
}

std::optional<JoinRecord> JoinRecord::try_parse(const std::string& text) {
  return lenient<JoinRecord>([&] { return parse(text); });
}

std::string Placement::serialize() const {
  if (!admitted) return "spare";
  return "ok " + std::to_string(group_rank) + " " + std::to_string(group_world_size) + " " +
         std::to_string(rank_offset) + " " + std::to_string(world_size) + " " + leader_node_id;
}

Placement Placement::parse(const std::string& text) {
  Placement p;
  if (text == "spare") return p;
  std::istringstream in(text);
  std::string tag;
  if (!(in >> tag >> p.group_rank >> p.group_world_size >> p.rank_offset >> p.world_size >>
        p.leader_node_id) ||
      tag != "ok") {
    throw StoreError("rendezvous: malformed assignment '" + text + "'");
  }
  p.admitted = true;
  return p;
}

std::optional<Placement> Placement::try_parse(const std::string& text) {
  return lenient<Placement>([&] { return parse(text); });
}

std::string Closed::serialize() const {
  return std::to_string(candidates) + " " + std::to_string(closer);
}

std::optional<Closed> Closed::parse(const std::string& value) {
  const auto f = split(value, ' ');
  if (f.size() != 2) return std::nullopt;
  const auto candidates = decimal(f[0]);
  const auto closer = decimal(f[1]);
  if (!candidates || !closer || *candidates < 0 || *closer < 1) return std::nullopt;
  return Closed{*candidates, *closer};
}

std::string ClosedWithout::serialize() const {
  return (job_failed ? "failjob " : "fail ") + why;
}

std::optional<ClosedWithout> ClosedWithout::parse(const std::string& value) {
  auto [head, rest] = head_and_rest(value);
  if (head != "fail" && head != "failjob") return std::nullopt;
  return ClosedWithout{head == "failjob", rest};
}

const char* to_string(EndKind k) {
  switch (k) {
    case EndKind::kScaleUp:
      return "scale_up";
    case EndKind::kScaleDown:
      return "scale_down";
    case EndKind::kReplace:
      return "replace";
    case EndKind::kRestart:
      return "restart";
    case EndKind::kFail:
      return "fail";
    case EndKind::kDone:
      return "done";
  }
  return "?";
}

std::string EndRecord::serialize() const {
  return std::string(to_string(kind)) + " " + std::to_string(target) + " " +
         std::to_string(survivors) + " " + std::to_string(wait.count()) + " " +
         std::to_string(release) + " " + reason;
}

EndRecord EndRecord::parse(const std::string& text) {
  std::istringstream in(text);
  std::string kind;
  EndRecord r;
  int64_t wait_ms = 0;
  if (!(in >> kind >> r.target >> r.survivors >> wait_ms >> r.release)) {
    throw StoreError("rendezvous: malformed end record '" + text + "'");
  }
  static const EndKind kAll[] = {EndKind::kScaleUp, EndKind::kScaleDown, EndKind::kReplace,
                                 EndKind::kRestart, EndKind::kFail,      EndKind::kDone};
  bool known = false;
  for (EndKind k : kAll) {
    if (kind == to_string(k)) {
      r.kind = k;
      known = true;
    }
  }
  if (!known) throw StoreError("rendezvous: unknown end kind in '" + text + "'");
  r.wait = Millis(wait_ms);
  std::getline(in >> std::ws, r.reason);
  return r;
}

std::optional<EndRecord> EndRecord::try_parse(const std::string& text) {
  return lenient<EndRecord>([&] { return parse(text); });
}

RoundTarget RoundTarget::of(const EndRecord& end) {
  return RoundTarget{end.target, end.survivors, end.wait};
}

std::string RoundTarget::serialize() const {
  return std::to_string(target) + " " + std::to_string(survivors) + " " +
         std::to_string(wait.count());
}

RoundTarget RoundTarget::parse(const std::string& text) {
  std::istringstream in(text);
  RoundTarget t;
  int64_t wait_ms = 0;
  if (!(in >> t.target >> t.survivors >> wait_ms)) {
    throw StoreError("rendezvous: malformed round target '" + text + "'");
  }
  t.wait = Millis(wait_ms);
  return t;
}

std::string MasterAddress::serialize() const {
  return host + " " + std::to_string(port);
}

MasterAddress MasterAddress::parse(const std::string& text) {
  std::istringstream in(text);
  MasterAddress m;
  if (!(in >> m.host >> m.port)) {
    throw StoreError("rendezvous: malformed master address '" + text + "'");
  }
  return m;
}

std::string MemoryHoldings::serialize() const {
  std::string out =
      host + " " + std::to_string(port) + " " + std::to_string(step) + " " + std::to_string(round);
  const std::set<std::string> from_peers(fetched.begin(), fetched.end());
  for (const auto& s : snapshots) out += (from_peers.count(s) ? " +" : " ") + s;
  return out;
}

std::optional<MemoryHoldings> MemoryHoldings::try_parse(const std::string& text) {
  std::istringstream in(text);
  MemoryHoldings m;
  if (!(in >> m.host >> m.port >> m.step) || m.port <= 0 || m.port > 65535 || m.step < 0) {
    return std::nullopt;
  }
  // The round, then the names; an agent before rounds were marked wrote
  // the names alone (a name never starts with a digit: step_...).
  std::string s;
  if (in >> s) {
    if (std::isdigit(static_cast<unsigned char>(s[0]))) {
      const auto round = decimal(s);
      if (!round || *round < 0) return std::nullopt;
      m.round = static_cast<uint64_t>(*round);
      if (!(in >> s)) return m;
    }
    do {
      if (s.size() > 1 && s[0] == '+') {
        s.erase(0, 1);
        m.fetched.push_back(s);
      }
      m.snapshots.push_back(std::move(s));
    } while (in >> s);
  }
  return m;
}

std::string JobFinished::serialize() const {
  return (failed ? "fail " : "ok ") + reason;
}

JobFinished JobFinished::parse(const std::string& text) {
  const bool failed = text.rfind("fail", 0) == 0;
  const size_t sp = text.find(' ');
  return JobFinished{failed, sp == std::string::npos ? std::string() : text.substr(sp + 1)};
}

std::string serialize_members(const std::vector<Member>& members) {
  std::string out;
  for (const auto& m : members) {
    out += (out.empty() ? "" : "\n") + m.node_id + (m.host.empty() ? "" : " " + m.host);
  }
  return out;
}

std::vector<Member> parse_member_list(const std::string& text) {
  std::vector<Member> out;
  for (const auto& line : split(text, '\n')) {
    auto [id, host] = head_and_rest(line);
    out.push_back(Member{id, host});
  }
  return out;
}

std::vector<std::string> parse_members(const std::string& text) {
  std::vector<std::string> ids;
  for (auto& m : parse_member_list(text)) ids.push_back(std::move(m.node_id));
  return ids;
}

HeartbeatRecord HeartbeatRecord::at(int64_t unix_ms) {
  HeartbeatRecord r;
  r.unix_ms = unix_ms;
  return r;
}

std::string HeartbeatRecord::serialize() const {
  std::string out =
      std::to_string(unix_ms) + " " + std::to_string(step) + " " + std::to_string(compute_us) + " ";
  if (samples_per_s && std::isfinite(*samples_per_s) && *samples_per_s >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", *samples_per_s);
    out += buf;
  } else {
    out += "-";
  }
  out += " ";
  if (rank_steps.empty()) return out + "-";
  for (size_t i = 0; i < rank_steps.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(rank_steps[i]);
  }
  return out;
}

std::optional<HeartbeatRecord> HeartbeatRecord::try_parse(const std::string& text) {
  const auto f = split(text, ' ');
  if (f.empty()) return std::nullopt;
  const auto ms = decimal(f[0]);
  if (!ms) return std::nullopt;
  HeartbeatRecord r = at(*ms);
  if (f.size() >= 3) {
    const auto step = decimal(f[1]);
    const auto compute = decimal(f[2]);
    if (step) r.step = *step;
    if (compute && *compute >= 0 && *compute <= UINT32_MAX) {
      r.compute_us = static_cast<uint32_t>(*compute);
    }
  }
  // The progress for watch is a nicety: a field that does not parse is left out.
  if (f.size() >= 5) {
    char* end = nullptr;
    const double samples = std::strtod(f[3].c_str(), &end);
    if (f[3] != "-" && end == f[3].c_str() + f[3].size() && std::isfinite(samples)) {
      r.samples_per_s = samples;
    }
    if (f[4] != "-") {
      for (const auto& s : split(f[4], ',')) {
        const auto v = decimal(s);
        if (!v) {
          r.rank_steps.clear();
          break;
        }
        r.rank_steps.push_back(*v);
      }
    }
  }
  return r;
}

}  // namespace elasticrun::rendezvous
