// The nodes of one simulated job (docs/simulator.md): those available to it
// (the capacity), the agents running on them, the agents being started, and
// spot nodes noticed until they go. What the job does with them (its
// rounds, its members) is the simulator's; its calls say.
#pragma once

#include <algorithm>

namespace elasticrun::sim {

class Nodes {
 public:
  // `capacity` nodes available, none noticed, no agent yet (start()).
  // `spares`: every available node runs an agent (Controller::holds_spares).
  Nodes(int capacity, bool spares) : capacity_(capacity), spares_(spares) {}

  int capacity() const { return capacity_; }
  // Nodes there: the capacity, and noticed nodes that a job that does not
  // hear notices still trains on.
  int present() const { return capacity_ + doomed_; }
  // Available nodes running an agent: the members (not those lost or
  // leaving) and the agents waiting. All of them with spares.
  int agents() const { return agents_; }
  // Spot nodes noticed and not gone yet: billed, out of the capacity.
  int noticed() const { return noticed_; }
  // The members on noticed nodes that the job still trains on, as noticed.
  int doomed_members() const { return doomed_members_; }

  // The agents at time 0: one on every available node with spares, else
  // `wanted` of them at most.
  void start(int wanted) { agents_ = spares_ ? capacity_ : std::min(capacity_, wanted); }

  // The nodes available now. changed() follows, once the members lost or
  // leaving are known, unless present() stays the same (notice()).
  void set_capacity(int capacity) { capacity_ = capacity; }

  // Keeps agents() in step after the capacity went from `before` to
  // capacity() and `gone` members were lost or are leaving; `wanted`: the
  // agents the job keeps without spares (the simulator's agents_wanted,
  // for the capacity now). With spares every available node runs an agent.
  // Without, nodes the trace adds come with an agent while the job can use
  // them (starting those is the trace's business); nodes taken away are
  // agent-less idle ones first.
  void changed(int before, int gone, int wanted);

  // Without spares, after everything that happened at one time, the job
  // holding `members` and keeping `wanted` agents: idle agents it cannot use
  // are stopped, and agents it is short of are started on idle nodes.
  // Returns how many were started; they are up when agents_up() says so
  // (node_start later). 0 with spares.
  int sync(int members, int wanted);

  // `started` agents that sync() started are up: those not cancelled since
  // (a later sync()) and with a node to run on. Returns how many came up.
  int agents_up(int started);

  // `nodes` spot nodes got a notice: set_capacity() took them out, and
  // they are billed until gone(). `trained_on`: the job does not hear the
  // notice and trains on them until then, `members` of its members on them;
  // they stay present().
  void notice(int nodes, bool trained_on, int members);

  // Nodes that notice() was told of go, with the same arguments.
  void gone(int nodes, bool trained_on, int members);

 private:
  int capacity_;
  const bool spares_;
  int agents_ = 0;
  int starting_ = 0;  // agents being started (without spares)
  int noticed_ = 0;   // spot nodes noticed and not gone yet: billed, out of capacity_
  // Of those, the nodes a job that does not hear notices still has, and
  // the members among them when noticed.
  int doomed_ = 0;
  int doomed_members_ = 0;
};

}  // namespace elasticrun::sim
