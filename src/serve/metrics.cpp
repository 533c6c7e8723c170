#include "serve/metrics.hpp"

#include <prometheus/text_serializer.h>

#include <cmath>

#include "events/types.hpp"

namespace elasticrun::serve {
namespace {

namespace type = events::type;

// Step times from 1 ms to about 17 min, each bucket twice the one before:
// a 10 ms loop and a minutes-long step both land in a bucket that tells.
prometheus::Histogram::BucketBoundaries step_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double s = 0.001; s < 1100; s *= 2) b.push_back(s);
  return b;
}

bool is_checkpoint_section(const std::string& name) {
  return name.rfind("ckpt", 0) == 0 || name.rfind("save", 0) == 0 || name.rfind("checkpoi", 0) == 0;
}

int64_t int_field(const nlohmann::json& f, const char* key, int64_t fallback) {
  auto it = f.find(key);
  return it != f.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string string_field(const nlohmann::json& f, const char* key) {
  auto it = f.find(key);
  return it != f.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

AgentMetrics::AgentMetrics(const std::string& run_id, const std::string& host, int nproc_per_node)
    : registry_(std::make_shared<prometheus::Registry>()),
      labels_{{"run_id", run_id}, {"host", host}},
      world_size_(
          gauge("elasticrun_world_size", "Workers in the job's current round (WORLD_SIZE).")),
      nodes_(gauge("elasticrun_nodes", "Nodes in the job's current round.")),
      spare_nodes_(gauge("elasticrun_spare_nodes",
                         "Agents waiting to join, as the leader last saw them (leader only).")),
      excluded_nodes_(gauge("elasticrun_excluded_nodes",
                            "Nodes excluded for a cooldown, as the leader last saw them "
                            "(leader only).")),
      round_(gauge("elasticrun_round",
                   "The rendezvous round this node is in (a fixed job's attempt).")),
      group_rank_(
          gauge("elasticrun_group_rank", "This node's group rank in its round (0: the leader).")),
      restarts_(prometheus::BuildCounter()
                    .Name("elasticrun_restarts_total")
                    .Help("Restarts of the job's workers (TORCHELASTIC_RESTART_COUNT).")
                    .Labels(labels_)
                    .Register(*registry_)
                    .Add({})),
      scale_events_(prometheus::BuildCounter()
                        .Name("elasticrun_scale_events_total")
                        .Help("Rounds that ended, by the end record's kind (scale_up, "
                              "scale_down, replace, restart, fail, done).")
                        .Labels(labels_)
                        .Register(*registry_)),
      faults_(prometheus::BuildCounter()
                  .Name("elasticrun_health_faults_total")
                  .Help("Health faults found on this node, by HyperPod's reason (Hang, "
                        "NonFiniteLoss, GpuError, LogFault_<rule>, ...).")
                  .Labels(labels_)
                  .Register(*registry_)),
      worker_step_family_(
          prometheus::BuildGauge()
              .Name("elasticrun_worker_step")
              .Help("Each local rank's last step published through the SDK (-1: none).")
              .Labels(labels_)
              .Register(*registry_)),
      step_seconds_(prometheus::BuildHistogram()
                        .Name("elasticrun_step_seconds")
                        .Help("How long local rank 0's steps take, as the agent's health tick "
                              "sees them (exact to one --monitor-interval).")
                        .Labels(labels_)
                        .Register(*registry_)
                        .Add({}, step_buckets())),
      samples_per_second_(gauge("elasticrun_samples_per_second",
                                "The samples (tokens) per second this node's ranks report "
                                "through elasticrun.step(tokens_per_s=...), summed.")),
      last_checkpoint_seconds_(
          gauge("elasticrun_last_checkpoint_seconds",
                "How long the last checkpoint save took: a section named ckpt*, save* or "
                "checkpoint* (elasticrun.section(\"ckpt\") around the save).")) {
  for (int lr = 0; lr < nproc_per_node; ++lr) {
    worker_step_.push_back(&worker_step_family_.Add({{"local_rank", std::to_string(lr)}}));
    worker_step_.back()->Set(-1);
  }
  last_checkpoint_seconds_.Set(NAN);
}

void AgentMetrics::on_event(const events::Event& e) {
  const auto& f = e.fields;
  if (e.type == type::kRoundStart) {
    world_size_.Set(static_cast<double>(int_field(f, "world_size", 0)));
    nodes_.Set(static_cast<double>(int_field(f, "nodes", 0)));
    round_.Set(static_cast<double>(int_field(f, "round", 0)));
    group_rank_.Set(static_cast<double>(int_field(f, "group_rank", 0)));
    // A new round's leader says again what waits; a follower says nothing.
    spare_nodes_.Set(0);
    const double restarts = static_cast<double>(int_field(f, "restart_count", 0));
    std::lock_guard<std::mutex> lock(mu_);
    if (restarts > restarts_seen_) {
      restarts_.Increment(restarts - restarts_seen_);
      restarts_seen_ = restarts;
    }
  } else if (e.type == type::kRoundEnd) {
    scale_events_.Add({{"reason", string_field(f, "kind")}}).Increment();
    // No round until the next round_start: a node released to wait as a
    // spare must not go on counting in the job's size.
    world_size_.Set(0);
    nodes_.Set(0);
    group_rank_.Set(-1);
    samples_per_second_.Set(0);
  } else if (e.type == type::kWaiting) {
    spare_nodes_.Set(static_cast<double>(int_field(f, "waiting", 0)));
    excluded_nodes_.Set(static_cast<double>(int_field(f, "excluded", 0)));
  } else if (e.type == type::kHealthFault) {
    faults_.Add({{"kind", string_field(f, "reason")}}).Increment();
  } else if (e.type == type::kSection) {
    auto it = f.find("seconds");
    if (is_checkpoint_section(string_field(f, "name")) && it != f.end() && it->is_number()) {
      last_checkpoint_seconds_.Set(it->get<double>());
    }
  }
}

void AgentMetrics::observe_steps(const std::vector<int64_t>& steps, double step_seconds,
                                 double samples_per_second) {
  for (size_t lr = 0; lr < steps.size() && lr < worker_step_.size(); ++lr) {
    worker_step_[lr]->Set(static_cast<double>(steps[lr]));
  }
  if (std::isfinite(step_seconds)) step_seconds_.Observe(step_seconds);
  if (std::isfinite(samples_per_second)) samples_per_second_.Set(samples_per_second);
}

prometheus::Gauge& AgentMetrics::gauge(const char* name, const char* help) {
  return prometheus::BuildGauge()
      .Name(name)
      .Help(help)
      .Labels(labels_)
      .Register(*registry_)
      .Add({});
}

std::string AgentMetrics::scrape() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace elasticrun::serve
