#include "ctl/ctl_requests.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <thread>

#include "elastic/policy.hpp"
#include "rendezvous/records.hpp"
#include "util/strings.hpp"

namespace elasticrun::ctl {
namespace {

namespace keys = rendezvous::keys;
using Millis = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// How often wait_handled looks at ctl/handled: a leader reads requests once
// per heartbeat interval (1 s by default), so a tenth of that adds little
// delay, and two store round trips ten times a second cost nothing.
constexpr Millis kPollInterval{100};
// outcome(): the leader writes the end record a few store round trips after
// ctl/handled; this covers a loaded store. A round that does not end within
// it is reported as going on.
constexpr Millis kEndRecordGrace{1000};

std::string nodes(int n) {
  return std::to_string(n) + (n == 1 ? " node" : " nodes");
}

std::optional<int64_t> to_int(const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

// A key's value, or nullopt when it is absent. GET alone would wait for it.
std::optional<std::string> get_if_present(StoreClient& job, const std::string& key) {
  if (!job.check({key})) return std::nullopt;
  return job.get(key);
}

std::string finished_text(const std::string& value) {
  const auto f = rendezvous::JobFinished::parse(value);
  return std::string(f.failed ? "failed" : "finished") + (f.reason.empty() ? "" : ": " + f.reason);
}

uint64_t open_round(StoreClient& job) {
  const auto n = to_int(job.get(keys::kRound));
  if (!n || *n < 1) throw StoreError("malformed 'round' key in the job's store");
  return static_cast<uint64_t>(*n);
}

}  // namespace

std::string describe(const Request& r) {
  return r.kind == Request::Kind::kScale ? "scale to " + nodes(r.nodes)
                                         : "release of " + nodes(r.nodes);
}

Ticket submit(StoreClient& job, const Request& r) {
  if (r.nodes < 1) throw ConfigError("--nodes must be at least 1, not " + std::to_string(r.nodes));
  if (auto done = get_if_present(job, keys::kJobFinished)) {
    throw Error("the job has " + finished_text(*done) + "; nothing to " +
                (r.kind == Request::Kind::kScale ? "scale" : "release"));
  }
  Ticket t;
  const uint64_t open = open_round(job);
  t.first_round = std::max<uint64_t>(open - 1, 1);
  if (open > 1 && job.check({keys::end(open - 1)})) t.first_round = open;
  // The request first, then the seq that makes the leader look at it.
  if (r.kind == Request::Kind::kScale) {
    job.set(keys::kScaleRequest, std::to_string(r.nodes));
  } else {
    job.add(keys::kReleaseRequest, r.nodes);
  }
  t.seq = job.add(keys::kRequestSeq, 1);
  return t;
}

void wait_handled(StoreClient& job, const Ticket& t, Millis timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    // Read, never ADD 0: elasticctl writes nothing but requests.
    if (auto handled = get_if_present(job, keys::kRequestsHandled)) {
      if (auto n = to_int(*handled); n && *n >= t.seq) return;
    }
    if (auto done = get_if_present(job, keys::kJobFinished)) {
      throw Error("the job " + finished_text(*done) + ", before its leader handled request #" +
                  std::to_string(t.seq));
    }
    const auto left = std::chrono::duration_cast<Millis>(until - Clock::now());
    if (left <= Millis(0)) {
      throw TimeoutError("the leader did not handle request #" + std::to_string(t.seq) +
                         " within " + util::seconds_text(timeout) +
                         " (no round running?); it stays queued for the next leader, so do "
                         "not submit it again");
    }
    std::this_thread::sleep_for(std::min(left, kPollInterval));
  }
}

std::string outcome(StoreClient& job, const Request& r, const Ticket& t) {
  std::string line = "request #" + std::to_string(t.seq) + " (" + describe(r) + ") handled";
  const uint64_t open = open_round(job);
  if (open < 2 || t.first_round > open - 1) return line;
  const uint64_t running = open - 1;
  // The first round to end since the request was written is the one it
  // ended, if it ended one (or one that a concurrent event ended first).
  // Every closed round before `running` has ended; `running` gets the grace.
  std::optional<rendezvous::EndRecord> end;
  uint64_t round = t.first_round;
  for (; round <= running; ++round) {
    const std::string key = keys::end(round);
    try {
      if (round == running) job.wait({key}, kEndRecordGrace);
      if (job.check({key})) {
        end = rendezvous::EndRecord::parse(job.get(key));
        break;
      }
    } catch (const TimeoutError&) {
    }
  }
  auto size_of = [&](uint64_t n) {
    const auto closed = get_if_present(job, keys::closed(n));
    const auto c = closed ? rendezvous::Closed::parse(*closed) : std::nullopt;
    const auto members = c ? get_if_present(job, keys::members(n, c->closer)) : std::nullopt;
    return nodes(members ? static_cast<int>(rendezvous::parse_members(*members).size()) : 0);
  };
  if (end) {
    line += ": round " + std::to_string(round) + " ended (" + rendezvous::to_string(end->kind) +
            ", next round " + nodes(end->target) + ")";
    if (!end->reason.empty()) line += ": " + end->reason;
    if (round < running) line += "; round " + std::to_string(running) + " has " + size_of(running);
    return line;
  }
  line += ": round " + std::to_string(running) + " goes on at " + size_of(running);
  if (auto state = get_if_present(job, keys::kPolicyState)) {
    try {
      const auto s = elastic::PolicyState::parse(*state);
      line += s.cap ? "; the size limit is now " + nodes(*s.cap) : "; no size limit";
    } catch (const ConfigError&) {
      // A leader of another version wrote it; the report goes without.
    }
  }
  return line;
}

}  // namespace elasticrun::ctl
