// Which of a trace's nodes are spot and which on demand, and what a
// node-hour of each costs: the trace's `price` line (docs/simulator.md).
#pragma once

#include <algorithm>
#include <optional>

namespace elasticrun::sim {

// The job holds its on-demand nodes first and loses them last: of
// `capacity` available nodes, min(capacity, on_demand_nodes) are on demand
// and the rest are spot. Spot interruption notices hit spot nodes only.
// Without a price line every node counts as spot (any node may get a
// notice) and nothing has a price.
struct Fleet {
  std::optional<double> on_demand_price;  // per node-hour
  std::optional<double> spot_price;       // per node-hour
  int on_demand_nodes = 0;                // of nodes_max; the rest are spot

  bool priced() const { return on_demand_price.has_value() || spot_price.has_value(); }
  int on_demand(int capacity) const { return std::clamp(capacity, 0, on_demand_nodes); }
  int spot(int capacity) const { return std::max(0, capacity - on_demand_nodes); }

  // What the node-hours cost at these prices; nullopt without a price line.
  // A pool without a price has no nodes (parse_trace sees to it).
  std::optional<double> cost(double spot_node_hours, double on_demand_node_hours) const {
    if (!priced()) return std::nullopt;
    return spot_node_hours * spot_price.value_or(0) +
           on_demand_node_hours * on_demand_price.value_or(0);
  }
};

}  // namespace elasticrun::sim
