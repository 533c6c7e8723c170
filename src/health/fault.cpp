#include "health/fault.hpp"

#include <array>
#include <utility>

namespace elasticrun::health {
namespace {

constexpr std::array<std::pair<FaultKind, const char*>, 8> kNames = {{
    {FaultKind::kHang, "hang"},
    {FaultKind::kStartup, "startup"},
    {FaultKind::kNonFiniteLoss, "non_finite_loss"},
    {FaultKind::kLogFault, "log_fault"},
    {FaultKind::kLogHang, "log_hang"},
    {FaultKind::kLogSlow, "log_slow"},
    {FaultKind::kStraggler, "straggler"},
    {FaultKind::kGpu, "gpu"},
}};

}  // namespace

const char* to_string(FaultKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::optional<FaultKind> fault_kind_from_string(const std::string& name) {
  for (const auto& [k, n] : kNames) {
    if (name == n) return k;
  }
  return std::nullopt;
}

std::string Fault::reason() const {
  switch (kind) {
    case FaultKind::kHang:
      return "Hang";
    case FaultKind::kStartup:
      return "Startup";
    case FaultKind::kNonFiniteLoss:
      return "NonFiniteLoss";
    case FaultKind::kLogFault:
      return "LogFault_" + monitor;
    case FaultKind::kLogHang:
      return "LogHang_" + monitor;
    case FaultKind::kLogSlow:
      return "LogSlow_" + monitor;
    case FaultKind::kStraggler:
      return "Straggler";
    case FaultKind::kGpu:
      return "GpuError";
  }
  return "Unknown";
}

std::string Fault::describe() const {
  return reason() + ": " + message;
}

}  // namespace elasticrun::health
