#include "sim/controller.hpp"

#include <algorithm>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::sim {
namespace {

using elastic::Action;
using elastic::Decision;
using elastic::Observation;

Decision end_round(Action a, int target, Millis wait, std::string reason) {
  Decision d;
  d.action = a;
  d.target = target;
  d.wait_for_replacements = wait;
  d.reason = std::move(reason);
  return d;
}

Decision keep_running(int current) {
  Decision d;
  d.target = current;
  return d;
}

// The real policy. Growth, losses, departures and operator requests are all
// its own rules (docs/policy.md); the simulator only acts on its decisions.
class Elastic final : public Controller {
 public:
  Elastic(elastic::PolicyConfig c, bool spares) : policy_(std::move(c)), spares_(spares) {}
  Decision decide(const Observation& o) override { return policy_.decide(o); }
  bool saves_on_stop() const override { return true; }
  std::optional<int> largest_size_at_most(int nodes) const override {
    return elastic::largest_allowed_at_most(policy_.config(), nodes);
  }
  bool holds_spares() const override { return spares_; }

 private:
  elastic::Policy policy_;
  bool spares_;
};

// A job allocated `size` nodes for good: capacity above it is not used;
// when it loses a member, or one leaves, it stops and starts again at
// `size` when that many nodes are there (at once with spares). Operator
// requests mean nothing to it: a preemption takes its nodes by force.
class Static final : public Controller {
 public:
  explicit Static(int size) : size_(size) {}
  Decision decide(const Observation& o) override {
    if (o.lost > 0) return end_round(Action::kReplace, size_, kWaitForever, "lost members");
    if (o.leaving > 0) return end_round(Action::kScaleDown, size_, kWaitForever, "members leaving");
    return keep_running(o.current);
  }
  bool saves_on_stop() const override { return true; }
  std::optional<int> largest_size_at_most(int nodes) const override {
    if (nodes >= size_) return size_;
    return std::nullopt;
  }

 private:
  int size_;
};

// torchrun --nnodes MIN:MAX: any change in membership (a node joining
// while the job is below MAX, one leaving or dying) kills the workers and
// starts a new rendezvous that admits every node present up to MAX, with no
// stabilisation and no checkpoint on the way out. It knows no release or
// scale request, and no increment step.
class RestartOnChange final : public Controller {
 public:
  RestartOnChange(int min, int max) : min_(min), max_(max) {}
  Decision decide(const Observation& o) override {
    const int live = o.current - o.lost - o.leaving + o.waiting;
    const int size = std::min(max_, live);
    if (o.lost == 0 && o.leaving == 0 && size == o.current) return keep_running(o.current);
    const Action a = o.lost > 0         ? Action::kReplace
                     : size > o.current ? Action::kScaleUp
                                        : Action::kScaleDown;
    // Target MAX with no wait: the round closes at once with whatever
    // largest_size_at_most() allows (every node present, at least MIN).
    return end_round(a, max_, Millis(0), "membership changed");
  }
  bool saves_on_stop() const override { return false; }
  // Nothing in torchrun reads the instance metadata: the node's loss is the
  // first it knows of an interruption.
  bool hears_notices() const override { return false; }
  std::optional<int> largest_size_at_most(int nodes) const override {
    if (nodes < min_) return std::nullopt;
    return std::min(nodes, max_);
  }

 private:
  int min_;
  int max_;
};

}  // namespace

const std::vector<std::string>& controller_names() {
  static const std::vector<std::string> names = {"static", "restart_on_change", "elastic",
                                                 "elastic-nostab", "elastic-nospares"};
  return names;
}

std::unique_ptr<Controller> make_controller(std::string_view name, const Trace& trace) {
  if (name == "static") return std::make_unique<Static>(trace.start_size());
  if (name == "restart_on_change") {
    return std::make_unique<RestartOnChange>(trace.policy.min_replicas, trace.policy.max_replicas);
  }
  if (name == "elastic") return std::make_unique<Elastic>(trace.policy, true);
  // What hot spares buy: the same policy, with an agent to start (node_start)
  // before a node the job did not need becomes a replacement.
  if (name == "elastic-nospares") return std::make_unique<Elastic>(trace.policy, false);
  if (name == "elastic-nostab") {
    // What stabilisation buys: the same rules, acting on every change at once.
    elastic::PolicyConfig c = trace.policy;
    c.scaling_timeout = Millis(0);
    c.min_stable_period = Millis(0);
    c.max_stable_period = Millis(0);
    return std::make_unique<Elastic>(std::move(c), true);
  }
  std::string known;
  for (const auto& n : controller_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown policy " + util::quote(name) + " (known: " + known + ")");
}

}  // namespace elasticrun::sim
