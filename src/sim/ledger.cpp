#include "sim/ledger.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "elastic/policy.hpp"
#include "sim/stretch.hpp"

namespace elasticrun::sim {
namespace {

double hours(Millis d) {
  return static_cast<double>(d.count()) / 3600e3;
}

double seconds(Millis d) {
  return static_cast<double>(d.count()) / 1e3;
}

}  // namespace

void Ledger::elapse(Millis dt, int capacity, int noticed) {
  const int usable = std::min(capacity, trace_.policy.max_replicas);
  const int ideal = elastic::largest_allowed_at_most(trace_.policy, usable).value_or(0);
  r_.ideal_tokens += seconds(dt) * trace_.throughput.at(ideal);
  r_.idle_node_hours += hours(dt) * std::max(0, usable - r_.static_size);
  r_.spot_node_hours += hours(dt) * (trace_.fleet.spot(capacity) + noticed);
  r_.on_demand_node_hours += hours(dt) * trace_.fleet.on_demand(capacity);
}

void Ledger::account_running(Millis now, int size, bool saved) {
  const Millis length = now - since_;
  const Stretch s = stretch(trace_, length);
  const Millis kept = saved ? s.trained : s.durable;
  const double rate = trace_.throughput.at(size);
  series_.stretch_ended(trace_, since_, s, kept, rate, size, r_.useful, r_.tokens);
  r_.useful += kept;
  r_.lost_work += s.trained - kept;
  r_.checkpointing += s.checkpointing;
  r_.tokens += seconds(kept) * rate;
  r_.absorbed_node_hours += hours(length) * std::max(0, size - r_.static_size);
  r_.time_at_size[size] += length;
  since_ = now;
}

void Ledger::account_down(Millis now) {
  r_.time_at_size[0] += now - since_;
  since_ = now;
}

void Ledger::running_from(Millis now, int size) {
  if (last_running_size_ && size != *last_running_size_) {
    const int direction = size > *last_running_size_ ? 1 : -1;
    ++r_.scale_events;
    ++(direction > 0 ? r_.scale_ups : r_.scale_downs);
    if (last_scale_ && last_scale_->second == -direction &&
        now - last_scale_->first < trace_.policy.min_stable_period) {
      ++r_.thrash_events;
    }
    last_scale_ = {now, direction};
  }
  last_running_size_ = size;
  series_.stretch_started();
}

std::optional<Millis> Ledger::work_done_at(Millis now, int size) const {
  if (!trace_.work) return std::nullopt;
  const double rate = trace_.throughput.at(size);
  if (rate <= 0) return std::nullopt;
  const double left_ms = std::max(0.0, (*trace_.work - r_.tokens) / rate * 1e3);
  if (left_ms > static_cast<double>(trace_.duration.count())) return std::nullopt;
  const Millis trained(static_cast<int64_t>(std::ceil(left_ms)));
  return std::max(now, since_ + length_to_train(trace_, trained));
}

void Ledger::mark(Millis at, int present, int world, bool always) {
  series_.mark({at, present, world, r_.useful, r_.tokens}, always);
}

void Ledger::close() {
  r_.down = r_.time_at_size[0];
  r_.cost = trace_.fleet.cost(r_.spot_node_hours, r_.on_demand_node_hours);
}

}  // namespace elasticrun::sim
