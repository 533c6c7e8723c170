#include "sim/nodes.hpp"

#include <algorithm>

namespace elasticrun::sim {

void Nodes::changed(int before, int gone, int wanted) {
  if (spares_) {
    agents_ = present();
  } else if (capacity_ > before) {
    agents_ += std::min(capacity_ - before, std::max(0, wanted - agents_));
  } else {
    agents_ = std::min(agents_ - gone, capacity_);
  }
}

int Nodes::sync(int members, int wanted) {
  if (spares_) return 0;
  agents_ = std::max(members, std::min(agents_, wanted));
  starting_ = std::min(starting_, std::max(0, wanted - agents_));
  const int short_of = wanted - agents_ - starting_;
  if (short_of <= 0) return 0;
  starting_ += short_of;
  return short_of;
}

int Nodes::agents_up(int started) {
  // Starts cancelled since (sync) are taken off the latest.
  const int up = std::min({started, starting_, capacity_ - agents_});
  starting_ -= std::min(started, starting_);
  if (up > 0) agents_ += up;
  return up;
}

void Nodes::notice(int nodes, bool trained_on, int members) {
  noticed_ += nodes;
  if (!trained_on) return;
  doomed_ += nodes;
  doomed_members_ += members;
}

void Nodes::gone(int nodes, bool trained_on, int members) {
  noticed_ -= nodes;
  if (!trained_on) return;
  doomed_ -= nodes;
  doomed_members_ -= members;
}

}  // namespace elasticrun::sim
