// An agent's Prometheus metrics (docs/metrics.md), kept in a
// prometheus-cpp registry and served as the text format by the agent's HTTP
// server (http_server.hpp). Most series follow the event log (it observes
// every event the agent records: rounds, decisions, faults, progress); the
// step times and the workers' steps come straight from the attempt's
// health tick (observe_steps). Every method may be called from any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "events/event_log.hpp"

namespace elasticrun::serve {

class AgentMetrics final : public events::EventObserver {
 public:
  // `run_id` and `host` label every series.
  AgentMetrics(const std::string& run_id, const std::string& host, int nproc_per_node);

  void on_event(const events::Event& e) override;

  // From the health tick: each local rank's last step (-1: none), the
  // seconds its step took (measured by the tick; NaN: no step ended since
  // the last call), and the ranks' summed samples (tokens) per second.
  void observe_steps(const std::vector<int64_t>& steps, double step_seconds,
                     double samples_per_second);

  // The text format of every series (a scrape).
  std::string scrape() const;

 private:
  // A gauge without labels of its own (the constructor's helper).
  prometheus::Gauge& gauge(const char* name, const char* help);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Labels labels_;  // run_id and host, on every series
  prometheus::Gauge& world_size_;
  prometheus::Gauge& nodes_;
  prometheus::Gauge& spare_nodes_;
  prometheus::Gauge& excluded_nodes_;
  prometheus::Gauge& round_;
  prometheus::Gauge& group_rank_;
  prometheus::Counter& restarts_;
  prometheus::Family<prometheus::Counter>& scale_events_;
  prometheus::Family<prometheus::Counter>& faults_;
  prometheus::Family<prometheus::Gauge>& worker_step_family_;
  std::vector<prometheus::Gauge*> worker_step_;  // by local rank
  prometheus::Histogram& step_seconds_;
  prometheus::Gauge& samples_per_second_;
  prometheus::Gauge& last_checkpoint_seconds_;
  std::mutex mu_;  // restarts_seen_
  double restarts_seen_ = 0;
};

}  // namespace elasticrun::serve
