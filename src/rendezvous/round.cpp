// What agents do with a round once it has closed: its end record, the
// workers' store address, waiting and leaving agents, the agreed stop step,
// the exit barrier, and the job-wide counters (docs/protocol.md,
// "Rendezvous"). Joining and closing are in rendezvous.cpp.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "rendezvous/text.hpp"

namespace elasticrun::rendezvous {

using detail::rkey;
using detail::split;
using detail::to_int;

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

// "<kind> <target> <survivors> <wait_ms> <release> <reason...>"
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

namespace keys {
std::string prefix(const std::string& run_id) {
  return "/elasticrun/" + run_id + "/";
}
std::string heartbeat(const std::string& node_id) {
  return "hb/" + node_id;
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
}  // namespace keys

std::string Closed::serialize() const {
  return std::to_string(candidates) + " " + std::to_string(closer);
}

std::optional<Closed> Closed::parse(const std::string& value) {
  const auto f = split(value, ' ');
  if (f.size() != 2) return std::nullopt;
  Closed c;
  try {
    c.candidates = to_int(f[0], "closed count");
    c.closer = to_int(f[1], "closed by");
  } catch (const StoreError&) {
    return std::nullopt;
  }
  if (c.candidates < 0 || c.closer < 1) return std::nullopt;
  return c;
}

void Rendezvous::publish_master(uint64_t round, const std::string& host, int port) {
  client_.set(rkey(round, "master"), host + " " + std::to_string(port));
}

std::pair<std::string, int> Rendezvous::master(uint64_t round) {
  std::istringstream in(client_.get(rkey(round, "master"), config_.join_timeout));
  std::pair<std::string, int> m;
  if (!(in >> m.first >> m.second)) throw StoreError("rendezvous: malformed master address");
  return m;
}

EndRecord Rendezvous::end_round(uint64_t round, const EndRecord& record) {
  const std::string mine = record.serialize();
  const std::string now = client_.compare_set(rkey(round, "end"), "", mine);
  if (now == mine) {
    client_.set(rkey(round + 1, "target"), std::to_string(record.target) + " " +
                                               std::to_string(record.survivors) + " " +
                                               std::to_string(record.wait.count()));
  }
  return EndRecord::parse(now);
}

std::optional<EndRecord> Rendezvous::wait_end(uint64_t round, Millis timeout) {
  const std::string key = rkey(round, "end");
  try {
    client_.wait({key}, timeout);
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
  return EndRecord::parse(client_.get(key));
}

std::vector<std::string> Rendezvous::members(uint64_t round) {
  return split(client_.get(rkey(round, "members")), '\n');
}

int Rendezvous::waiting_after(uint64_t round) {
  return static_cast<int>(client_.add(rkey(round + 1, "count"), 0));
}

void Rendezvous::announce_leaving(uint64_t round) {
  client_.add(rkey(round, "leaving"), 1);
}

int Rendezvous::leaving(uint64_t round) {
  return static_cast<int>(client_.add(rkey(round, "leaving"), 0));
}

// Raises the decimal at key to at least value (COMPARE_SET until it holds).
void Rendezvous::raise_to(const std::string& key, int64_t value) {
  const std::string mine = std::to_string(value);
  std::string cur = client_.compare_set(key, "", mine);
  while (cur != mine && to_int(cur, key) < value) {
    const std::string next = client_.compare_set(key, cur, mine);
    if (next == cur) break;  // cannot happen: a failed swap returns the new value
    cur = next;
  }
}

std::optional<int64_t> Rendezvous::agree_stop_step(uint64_t round, int members,
                                                   int64_t local_max_step, double steps_per_s,
                                                   Millis lead, Millis budget) {
  raise_to(rkey(round, "stop/max_step"), local_max_step);
  raise_to(rkey(round, "stop/max_rate_mhz"), static_cast<int64_t>(steps_per_s * 1000));
  const std::string stop_key = rkey(round, "stop/step");
  if (client_.add(rkey(round, "stop/posted"), 1) >= members) {
    const int64_t max_step = to_int(client_.get(rkey(round, "stop/max_step")), "max step");
    const double rate =
        static_cast<double>(to_int(client_.get(rkey(round, "stop/max_rate_mhz")), "max rate")) /
        1000.0;
    const auto ahead =
        static_cast<int64_t>(std::ceil(rate * static_cast<double>(lead.count()) / 1000.0));
    client_.compare_set(stop_key, "", std::to_string(std::max<int64_t>(max_step, 0) + ahead + 2));
  }
  try {
    client_.wait({stop_key}, budget);
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
  return to_int(client_.get(stop_key), "stop step");
}

int64_t Rendezvous::arrive_done(uint64_t round) {
  return client_.add(rkey(round, "done"), 1);
}

int64_t Rendezvous::failures() {
  return client_.add(keys::kFailures, 0);
}

void Rendezvous::mark_job_finished(bool failed, const std::string& reason) {
  client_.compare_set(keys::kJobFinished, "", (failed ? "fail " : "ok ") + reason);
}

std::optional<std::pair<bool, std::string>> Rendezvous::job_finished() {
  if (!client_.check({keys::kJobFinished})) return std::nullopt;
  const std::string v = client_.get(keys::kJobFinished);
  const bool failed = v.rfind("fail", 0) == 0;
  const size_t sp = v.find(' ');
  return std::make_pair(failed, sp == std::string::npos ? std::string() : v.substr(sp + 1));
}

}  // namespace elasticrun::rendezvous
