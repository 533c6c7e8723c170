// The health monitors as the command line gives them (docs/health.md).
//
// Plain data, like ElasticOptions: src/cli does not depend on src/health's
// logic (it includes only health/specs.hpp, the job config's log rules and
// restart limits as plain data); the launch plan (agent/launch_plan) maps
// these onto the monitors' own configuration. Values here are validated:
// times >= 0.
#pragma once

#include <optional>
#include <vector>

#include "health/specs.hpp"

namespace elasticrun::cli {

struct HealthOptions {
  // --hang-timeout SECONDS|auto|off: no step progress for that long (after
  // the first step) is a hang. auto derives the limit from the job's own
  // step times (docs/health.md); off turns the monitor off.
  enum class Hang { kAuto, kOff, kFixed };
  Hang hang = Hang::kAuto;
  double hang_seconds = 0;  // kFixed
  // --startup-timeout SECONDS: no first step within that long of the
  // workers' start is a fault; 0: no limit.
  double startup_timeout = 0;
  // --non-finite-loss on|off: a NaN or infinite loss reported through the
  // SDK is a fault.
  bool non_finite_loss = true;
  // Bad nodes (elastic jobs): --exclude-after faults of a node's workers
  // within --exclude-window seconds exclude it for --exclude-cooldown
  // seconds, twice as long on each repeat; 0 faults: never.
  int exclude_after = 3;
  double exclude_window = 600;
  double exclude_cooldown = 300;
  // The straggler monitor (elastic jobs): a node whose compute time stays
  // above --straggler-factor times the other nodes' median for
  // --straggler-points samples in a row is excluded; factor 0: off.
  double straggler_factor = 0;
  int straggler_points = 10;
  // The job config's runPolicy (--config): HyperPod's log monitoring rules
  // and restart policy (docs/job-config.md).
  std::vector<health::LogRuleSpec> log_rules;
  std::optional<health::RestartPolicySpec> restart_policy;
  // Whether --max-restarts (or PET_MAX_RESTARTS) was given: with a restart
  // policy it is one more cap on the total, without one torchrun's limit.
  bool max_restarts_given = false;
  // --gpu-health auto|off: the NVIDIA driver's error reports (XIDs, ECC
  // errors, remapped rows) of the workers' GPUs, through NVML. auto: where
  // NVML and a GPU exist.
  enum class Gpu { kAuto, kOff };
  Gpu gpu = Gpu::kAuto;
};

}  // namespace elasticrun::cli
