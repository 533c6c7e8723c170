// What agents do with a round once it has closed: its end record, the
// workers' store address, waiting and leaving agents, the agreed stop step,
// the exit barrier, and the job-wide counters (docs/protocol.md,
// "Rendezvous"). Joining and closing are in rendezvous.cpp.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous.hpp"
#include "util/logging.hpp"

namespace elasticrun::rendezvous {

void Rendezvous::publish_master(uint64_t round, const std::string& host, int port) {
  client_.set(keys::master(round), MasterAddress{host, port}.serialize());
}

std::pair<std::string, int> Rendezvous::master(uint64_t round) {
  const MasterAddress m =
      MasterAddress::parse(client_.get(keys::master(round), config_.join_timeout));
  return {m.host, m.port};
}

EndRecord Rendezvous::end_round(uint64_t round, const EndRecord& record) {
  const std::string mine = record.serialize();
  const std::string now = client_.compare_set(keys::end(round), "", mine);
  if (now == mine) client_.set(keys::target(round + 1), RoundTarget::of(record).serialize());
  return EndRecord::parse(now);
}

std::optional<EndRecord> Rendezvous::wait_end(uint64_t round, Millis timeout) {
  const std::string key = keys::end(round);
  try {
    client_.wait({key}, timeout);
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
  return EndRecord::parse(client_.get(key));
}

std::vector<Member> Rendezvous::member_list(uint64_t round) {
  const std::string value = client_.get(keys::closed(round));
  const auto closed = Closed::parse(value);
  if (!closed) throw StoreError("round " + std::to_string(round) + " has no members: " + value);
  return parse_member_list(client_.get(keys::members(round, closed->closer)));
}

std::vector<std::string> Rendezvous::members(uint64_t round) {
  std::vector<std::string> ids;
  for (auto& m : member_list(round)) ids.push_back(std::move(m.node_id));
  return ids;
}

int Rendezvous::waiting_after(uint64_t round) {
  return static_cast<int>(client_.add(keys::arrivals(round + 1), 0));
}

void Rendezvous::announce_leaving(uint64_t round) {
  client_.add(keys::leaving(round), 1);
}

void Rendezvous::publish_memory(const MemoryHoldings& holdings) {
  client_.set(keys::memory(config_.node_id), holdings.serialize());
  client_.add(keys::kMemoryGeneration, 1);
}

int64_t Rendezvous::memory_generation() {
  return client_.add(keys::kMemoryGeneration, 0);
}

std::vector<std::optional<MemoryHoldings>> Rendezvous::memory_of(
    const std::vector<std::string>& node_ids) {
  std::vector<std::string> ks;
  for (const auto& id : node_ids) ks.push_back(keys::memory(id));
  std::vector<std::optional<MemoryHoldings>> out;
  if (ks.empty()) return out;
  // Set by each member with a tier before it first joined; an agent that
  // keeps none (--memory-tier-limit 0, no peer server) sets nothing, and
  // then the others are read one by one.
  if (client_.check(ks)) {
    for (const auto& v : client_.multi_get_present(ks)) {
      out.push_back(MemoryHoldings::try_parse(v));
    }
    return out;
  }
  for (const auto& k : ks) {
    out.push_back(client_.check({k}) ? MemoryHoldings::try_parse(client_.get(k)) : std::nullopt);
  }
  return out;
}

int Rendezvous::leaving(uint64_t round) {
  return static_cast<int>(client_.add(keys::leaving(round), 0));
}

void Rendezvous::offer_memory(uint64_t round, bool serving) {
  const int64_t i = client_.add(keys::handoff_count(round), 1);
  client_.set(keys::handoff(round, i), serving ? config_.node_id : "-");
}

std::vector<std::string> Rendezvous::memory_offers(uint64_t round, Millis wait) {
  const int expected = leaving(round);
  std::vector<std::string> ks;
  for (int i = 1; i <= expected; ++i) ks.push_back(keys::handoff(round, i));
  if (ks.empty()) return {};
  std::vector<std::string> offers;
  try {
    offers = client_.multi_get(ks, wait);
  } catch (const TimeoutError&) {
    util::logger("rendezvous")
        ->warn("round {}: not every node that left offered its memory tier within {} ms", round,
               wait.count());
    for (const auto& k : ks) {
      if (client_.check({k})) offers.push_back(client_.get(k));
    }
  }
  std::vector<std::string> out;
  for (auto& v : offers) {
    if (!v.empty() && v != "-") out.push_back(std::move(v));
  }
  return out;
}

int64_t Rendezvous::memory_taken(uint64_t round, int64_t delta) {
  return client_.add(keys::handoff_taken(round), delta);
}

std::optional<std::vector<std::string>> Rendezvous::members_if_closed(uint64_t round) {
  if (!client_.check({keys::closed(round)})) return std::nullopt;
  const auto closed = Closed::parse(client_.get(keys::closed(round)));
  if (!closed) return std::vector<std::string>{};  // closed without members (it failed)
  std::vector<std::string> ids;
  for (auto& m : parse_member_list(client_.get(keys::members(round, closed->closer)))) {
    ids.push_back(std::move(m.node_id));
  }
  return ids;
}

bool Rendezvous::ended(uint64_t round) {
  return client_.check({keys::end(round)});
}

// Raises the decimal at key to at least value (COMPARE_SET until it holds).
void Rendezvous::raise_to(const std::string& key, int64_t value) {
  const std::string mine = std::to_string(value);
  std::string cur = client_.compare_set(key, "", mine);
  while (cur != mine && parse_decimal(cur, key) < value) {
    const std::string next = client_.compare_set(key, cur, mine);
    if (next == cur) break;  // cannot happen: a failed swap returns the new value
    cur = next;
  }
}

std::optional<int64_t> Rendezvous::agree_stop_step(uint64_t round, int members,
                                                   int64_t local_max_step, double steps_per_s,
                                                   Millis lead, Millis budget) {
  raise_to(keys::stop_max_step(round), local_max_step);
  raise_to(keys::stop_max_rate(round), static_cast<int64_t>(steps_per_s * 1000));
  const std::string stop_key = keys::stop_step(round);
  if (client_.add(keys::stop_posted(round), 1) >= members) {
    const int64_t max_step = parse_decimal(client_.get(keys::stop_max_step(round)), "max step");
    const double rate =
        static_cast<double>(parse_decimal(client_.get(keys::stop_max_rate(round)), "max rate")) /
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
  return parse_decimal(client_.get(stop_key), "stop step");
}

int64_t Rendezvous::arrive_done(uint64_t round) {
  return client_.add(keys::done(round), 1);
}

int64_t Rendezvous::failures() {
  return client_.add(keys::kFailures, 0);
}

health::ExclusionState read_exclusions(StoreClient& client) {
  if (!client.check({keys::kNodeHealth})) return {};
  try {
    return health::ExclusionState::parse(client.get(keys::kNodeHealth));
  } catch (const ConfigError& e) {
    util::logger("rendezvous")->warn("ignoring the job's node health record: {}", e.what());
    return {};
  }
}

bool update_exclusions(StoreClient& client,
                       const std::function<bool(health::ExclusionState&)>& change) {
  // Writers are rare (a fault, a straggler, an operator): a few rounds of
  // COMPARE_SET settle any race.
  constexpr int kTries = 50;
  for (int i = 0; i < kTries; ++i) {
    const std::string old =
        client.check({keys::kNodeHealth}) ? client.get(keys::kNodeHealth) : std::string();
    health::ExclusionState state;
    if (!old.empty()) {
      try {
        state = health::ExclusionState::parse(old);
      } catch (const ConfigError&) {
        // Written by another version, unreadable: start it again.
      }
    }
    if (!change(state)) return false;
    const std::string next = state.serialize();
    if (client.compare_set(keys::kNodeHealth, old, next) == next) return true;
  }
  throw StoreError("the job's node health record kept changing under " + std::to_string(kTries) +
                   " updates");
}

health::ExclusionState Rendezvous::exclusions() {
  return read_exclusions(client_);
}

bool Rendezvous::update_exclusions(const std::function<bool(health::ExclusionState&)>& change) {
  return rendezvous::update_exclusions(client_, change);
}

void Rendezvous::mark_job_finished(bool failed, const std::string& reason) {
  client_.compare_set(keys::kJobFinished, "", JobFinished{failed, reason}.serialize());
}

std::optional<std::pair<bool, std::string>> Rendezvous::job_finished() {
  if (!client_.check({keys::kJobFinished})) return std::nullopt;
  const JobFinished f = JobFinished::parse(client_.get(keys::kJobFinished));
  return std::make_pair(f.failed, f.reason);
}

}  // namespace elasticrun::rendezvous
