// A capacity trace: the cost model, the elastic policy's settings and what
// happens to the nodes available to one job over time. The format is
// docs/simulator.md's; parse_trace() is its only reader.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/policy.hpp"
#include "sim/duration.hpp"
#include "sim/fleet.hpp"
#include "sim/throughput.hpp"

namespace elasticrun::sim {

enum class EventKind {
  kCapacity,    // `capacity N`: N nodes are available to the job from now on
  kPreempt,     // `preempt K`: an operator's release of K nodes for another job
  kFail,        // `fail K`: K nodes die (the job's members first)
  kSpotNotice,  // `spot_notice K`: K nodes leave gracefully (the job's members first)
  kReplace,     // `replace K`: K healthy nodes arrive
  kScale,       // `scale N`: an operator's scale request to N nodes
};

const char* event_name(EventKind k);

struct TraceEvent {
  Millis at{0};
  EventKind kind = EventKind::kCapacity;
  int count = 0;
  int line = 0;  // in the trace file; 0 for generated events
};

// A random process over the available nodes: `failures rate=R repair=D`
// (nodes die and come back D later) or `notices rate=R replace=D notice=N`
// (spot nodes get an interruption notice, go N later, and a replacement
// arrives D after the notice).
struct Generator {
  double rate_per_node_hour = 0;
  Millis delay{0};
  Millis notice{0};  // notices only
};

// What a policy pays to end a round and start the next one: the trace's
// `restart`, `checkpoint_load` and `checkpoint_save`, or what a `costs` line
// gives that policy instead (each launcher's measured recovery).
struct RecoveryCosts {
  Millis restart{0};
  Millis checkpoint_load{0};
  // The checkpoint a policy that saves on stop writes as it ends a round;
  // periodic saves cost the trace's checkpoint_save whatever the policy.
  Millis stop_save{0};
};

struct Trace {
  std::string name;  // the file, for messages
  Millis duration{0};
  int nodes_max = 0;
  int gpus_per_node = 1;
  Millis checkpoint_save{0};
  Millis checkpoint_load{0};
  Millis restart{0};
  // Starting an agent on an idle node that had none: only a job that holds
  // no spare agents pays it (elastic-nospares), when it needs a replacement.
  Millis node_start{std::chrono::seconds(120)};
  // Periodic checkpoints during training, each costing checkpoint_save of
  // stalled training; none when absent (a failure then loses everything since
  // the last restart).
  std::optional<Millis> checkpoint_every;
  Throughput throughput;
  elastic::PolicyConfig policy;
  uint64_t seed = 0;
  // The job's size at time 0, which is also the static allocation the
  // absorbed fraction is measured beyond. Default: the largest allowed size
  // within the capacity at time 0 (the smallest allowed when none fits: the
  // job then starts by waiting for nodes).
  std::optional<int> initial_size;
  std::optional<Generator> failures;
  std::optional<Generator> notices;
  Fleet fleet;  // `price`
  // What the throughput counts (`unit`): tokens, samples, images.
  std::string unit = "tokens";
  // `work N`: the job's whole work in `unit`; the run ends when it is done.
  std::optional<double> work;
  // `costs` lines: recovery costs of the policies they name.
  std::map<std::string, RecoveryCosts, std::less<>> policy_costs;
  // Capacity at time 0: nodes_max unless `at 0 capacity N` says otherwise.
  int initial_capacity = 0;
  // Events after time 0, in time order (file order among equal times).
  std::vector<TraceEvent> events;

  // initial_size, or its default.
  int start_size() const;
  // A `costs` line's for the policy so named, or else the trace's.
  RecoveryCosts recovery(std::string_view policy_name) const;
  // From a spot notice to the node's going: `notices`'s notice=, else 0.
  Millis notice_time() const { return notices ? notices->notice : Millis(0); }
};

// Parses a trace. Throws ConfigError "NAME:LINE: what is wrong" for the
// first bad line, or "NAME: ..." for a missing header.
Trace parse_trace(std::string_view text, const std::string& name);

// Reads and parses a trace file; ConfigError when it cannot be read.
Trace load_trace(const std::string& path);

}  // namespace elasticrun::sim
