// The elastic policy: which world sizes (in nodes, "replicas") a job may
// run at, and when a change in capacity becomes a scale event.
//
// Pure logic, no I/O and no clock of its own: the leader agent (and
// `elasticctl simulate`) feed it observations stamped with a time and act on
// its decisions. The state that must survive a change of leader (the last
// event, the backoff level, the operator's cap) is in PolicyState, which
// serialises to a short string the leader keeps in the store.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace elasticrun::elastic {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
// Time since an arbitrary origin shared by every observation of one job
// (the leader uses milliseconds of the store's job; the simulator its own).
using TimeMs = Millis;

struct PolicyConfig {
  int min_replicas = 1;
  int max_replicas = 1;
  // Allowed sizes: min + k*increment_step (k >= 0) up to max, and max itself
  // is NOT added when it is not on the grid. Ignored when discrete_values is set.
  int increment_step = 1;
  // Allowed sizes exactly (sorted, unique, each within [min, max]).
  std::vector<int> discrete_values;
  // Stabilisation before a scale-up: the extra agents must have been waiting
  // this long (continuously) before the job grows.
  Millis scaling_timeout{std::chrono::seconds(10)};
  // After members are lost, how long to wait for replacements before the job
  // shrinks without them.
  Millis faulty_scale_down_timeout{std::chrono::seconds(30)};
  // Minimum time between two voluntary scale events (scale-ups and operator
  // requests; losses and departures are never delayed and do not count).
  // Operator requests are not delayed either, but they count. The period
  // doubles with each voluntary event that comes within two periods of the
  // previous one, up to max_stable_period, and returns to min_stable_period
  // with an event that comes after a calm of max_stable_period and of two
  // periods (so a job flapping at the maximum stays there).
  Millis min_stable_period{std::chrono::seconds(30)};
  Millis max_stable_period{std::chrono::minutes(10)};

  // Throws ConfigError naming the flag when the sizes cannot work
  // (min < 1, min > max, step < 1, a discrete value out of range, unsorted or
  // repeated) or a duration is negative (max stable period below the min).
  void validate() const;
};

// The allowed sizes in increasing order.
std::vector<int> allowed_sizes(const PolicyConfig& c);
// The largest allowed size <= n, or nullopt when n is below the smallest.
// Computed without listing the sizes, so a huge max costs nothing.
std::optional<int> largest_allowed_at_most(const PolicyConfig& c, int n);
// The smallest allowed size: min_replicas, or the first discrete value.
int smallest_allowed(const PolicyConfig& c);

// What the leader sees at one moment.
struct Observation {
  TimeMs now{0};
  int current = 0;  // members of the running round
  int waiting = 0;  // live agents waiting to join (spares included)
  int leaving = 0;  // members that announced they are going away (SIGTERM)
  int lost = 0;     // members whose heartbeats stopped
  // `elasticctl scale --nodes N` received since the last decision.
  std::optional<int> scale_request;
  // `elasticctl release --nodes K` received since the last decision (sum).
  int release_request = 0;
};

enum class Action {
  kNone,       // keep running
  kScaleUp,    // end the round; the next one admits `target` members
  kScaleDown,  // end the round gracefully (leaving members, a release)
  kReplace,    // members were lost: end the round; the next waits up to
               // `wait_for_replacements` for `target` members, then shrinks
  kFail,       // fewer than min_replicas can ever run: fail the job. Policy
               // never returns it (it cannot know "ever"): waiting for joins
               // is the rendezvous's join timeout, and the caller decides.
};

struct Decision {
  Action action = Action::kNone;
  int target = 0;  // members of the next round (the size to aim for); kNone: current
  // For kReplace: how long the next round waits for `target` before it closes
  // with whatever allowed size it has.
  Millis wait_for_replacements{0};
  // Members the next round must not admit (an operator's release or scale
  // down, also when it comes with a loss or departure): how many of the most
  // recently added replicas give their place back. 0 otherwise; members
  // beyond `target` for other reasons (allowed sizes) stay as spares.
  int release = 0;
  std::string reason;  // one line for logs and the event record
  // When nothing is decided now but something may be later (a stabilisation
  // or stable period running out): the time to observe again.
  std::optional<TimeMs> recheck_at;
};

// Survives leader changes.
struct PolicyState {
  std::optional<TimeMs> last_event;  // time of the last voluntary scale event
  int backoff_level = 0;             // stable period = min * 2^level (capped)
  std::optional<int> cap;            // operator's size limit (scale / release)
  // First observation of the current stabilisation window: a larger allowed
  // size was reachable. Cleared when it no longer is and by every decision
  // that ends the round (the window restarts against the new round).
  std::optional<TimeMs> waiting_since;

  // "v1;last=<ms>;lvl=<n>;cap=<n>;ws=<ms>" in that order, absent optionals
  // left out: "v1;lvl=0" for a fresh state.
  std::string serialize() const;
  // The inverse of serialize(), for every state a Policy can reach (level >= 0,
  // cap >= 1). Throws ConfigError on any other text: unknown version or key,
  // keys out of order or repeated, numbers not in canonical decimal.
  static PolicyState parse(const std::string& text);
  bool operator==(const PolicyState&) const = default;
};

class Policy {
 public:
  // Validates the config (throws ConfigError). The state may come from a
  // leader that ran with another config: a cap outside [min, max] is clamped
  // where it is used.
  explicit Policy(PolicyConfig config, PolicyState state = {});

  // Decides from one observation and updates the state as if the decision
  // were carried out (the caller publishes it).
  Decision decide(const Observation& o);

  const PolicyState& state() const { return state_; }
  const PolicyConfig& config() const { return config_; }
  // The stable period in force now.
  Millis stable_period() const;

 private:
  PolicyConfig config_;
  PolicyState state_;
};

}  // namespace elasticrun::elastic
