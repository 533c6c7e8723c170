// The policies a simulation compares, behind one interface: elasticrun's
// real elastic::Policy (linked, not copied), the same policy with its
// stabilisation switched off, a static allocation, and torchrun's
// restart-on-any-change.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic/policy.hpp"
#include "sim/trace.hpp"

namespace elasticrun::sim {

// A Decision::wait_for_replacements that never runs out: the next round
// waits for its target however long it takes.
inline constexpr Millis kWaitForever = Millis::max();

class Controller {
 public:
  virtual ~Controller() = default;

  // elastic::Policy::decide's contract: one observation of the running round
  // (or of the round being started), one decision.
  virtual elastic::Decision decide(const elastic::Observation& o) = 0;

  // Whether the job saves a checkpoint when this controller ends a round for
  // any reason but lost members. elasticrun's scale protocol does; torchrun
  // kills the workers, which resume from their last periodic checkpoint.
  virtual bool saves_on_stop() const = 0;

  // The size a round closes at once its wait for replacements is over and
  // `nodes` are there, nullopt when it cannot close yet.
  virtual std::optional<int> largest_size_at_most(int nodes) const = 0;

  // Whether every available node runs an agent, so that nodes beyond the
  // sizes the job can use wait as hot spares. When not, the job keeps agents
  // only on the nodes it can use, and one more costs the trace's
  // node_start.
  virtual bool holds_spares() const { return true; }

  // Whether the job hears a spot notice when it comes (elasticrun's agent
  // watches for it, --spot-notice-url, and leaves gracefully then). One that
  // does not trains on through the notice and loses the node, as a failure,
  // when it goes.
  virtual bool hears_notices() const { return true; }
};

// The names, in the order tables show them.
const std::vector<std::string>& controller_names();

// One of controller_names() for this trace; ConfigError for another name.
std::unique_ptr<Controller> make_controller(std::string_view name, const Trace& trace);

}  // namespace elasticrun::sim
