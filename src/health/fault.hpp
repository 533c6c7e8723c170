// A fault: something wrong with a job that no exit code says, found by a
// health monitor (a hang, a non-finite loss, a log rule, a straggler, a GPU
// error). The agent records it, then treats it as a worker failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace elasticrun::health {

enum class FaultKind {
  kHang,           // no step progress for longer than the hang limit
  kStartup,        // no first step within the start-up limit
  kNonFiniteLoss,  // the SDK reported a NaN or infinite loss
  kLogFault,       // a log rule with faultOnMatch matched
  kLogHang,        // a log rule's expected line did not come in time
  kLogSlow,        // a log rule's metric crossed its threshold for N points
  kStraggler,      // the node's compute time stays above the job's median
  kGpu,            // the driver reported a GPU error (XID, ECC, retired pages)
};

// "hang", "startup", "non_finite_loss", "log_fault", ...: the kind's name in
// fault records, events and metrics labels.
const char* to_string(FaultKind kind);
std::optional<FaultKind> fault_kind_from_string(const std::string& name);

struct Fault {
  FaultKind kind = FaultKind::kHang;
  // The monitor that found it: "hang", "startup", "non_finite_loss",
  // "straggler", "gpu", or the log rule's name.
  std::string monitor;
  int local_rank = -1;     // -1: the node as a whole
  int64_t last_step = -1;  // the rank's last published step; -1: none
  std::string message;     // one line: what was seen, and the limit

  // HyperPod's reason name: "LogHang_<rule>", "LogSlow_<rule>",
  // "LogFault_<rule>" for log rules, else "Hang", "Startup",
  // "NonFiniteLoss", "Straggler", "GpuError".
  std::string reason() const;
  // One line for logs and stop requests: "<reason>: <message>".
  std::string describe() const;
};

}  // namespace elasticrun::health
