// A fake libnvidia-ml for machines without a GPU: the functions GPU health
// calls (src/agent/nvml_abi.hpp), answering from a JSON state file named
// by $FAKE_NVML_STATE, read again on every call so that a test can change
// a GPU while the agent watches it (write a temp file and rename it):
//
//   {"init": 0,                       nvmlInit_v2's answer (9: no driver)
//    "gpus": {"0000:1b:00.0": {       by PCI address, as the agent asks
//        "ecc_uncorrected": 0,        volatile uncorrectable ECC errors
//        "retired_pages_pending": false,
//        "remap_pending": false, "remap_failed": false,
//        "lost": false,               every query answers GPU_IS_LOST
//        "xids": [79],                every XID raised so far, oldest first:
//                                     each is delivered once, by the event wait
//        "unsupported": ["ecc", "retired", "remap", "events"]}}}
//
// Without $FAKE_NVML_STATE, nvmlInit_v2 fails as without a driver. Built
// twice: fake_nvml has every function; fake_nvml_old (FAKE_NVML_OLD) lacks
// nvmlDeviceGetRemappedRows and nvmlEventSetWait_v2, as an NVML older
// than R450 does. fake_nvml_calls(name) says how often a function was
// called since the last nvmlInit_v2, for the unit tests.
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/nvml_abi.hpp"

struct nvmlDevice_st {
  std::string pci;
  size_t delivered = 0;  // XIDs of the state's list handed out so far
};

struct nvmlEventSet_st {
  std::vector<nvmlDevice_st*> devices;  // in registration order
};

namespace {

using nlohmann::json;

std::mutex mu;
json last_state = json::object();
std::map<std::string, nvmlDevice_st> devices;  // node-based: handles stay valid
std::map<std::string, int> calls;

// The state file as it is now; the last good one while it is being replaced.
json state() {
  const char* path = std::getenv("FAKE_NVML_STATE");
  if (!path) return json::object();
  std::ifstream in(path);
  json j = json::parse(in, nullptr, false);
  if (!j.is_discarded() && j.is_object()) last_state = j;
  return last_state;
}

json gpu_state(const nvmlDevice_st* d) {
  const json s = state();
  if (!s.contains("gpus") || !s["gpus"].contains(d->pci)) return json::object();
  return s["gpus"][d->pci];
}

bool unsupported(const json& g, const char* what) {
  if (!g.contains("unsupported")) return false;
  for (const auto& u : g["unsupported"]) {
    if (u == what) return true;
  }
  return false;
}

// The common answer of a device query: lost, not supported, or go on (0).
nvmlReturn_t query(const char* fn, nvmlDevice_t device, const char* what, json& g) {
  ++calls[fn];
  if (!device) return NVML_ERROR_INVALID_ARGUMENT;
  g = gpu_state(device);
  if (g.value("lost", false)) return NVML_ERROR_GPU_IS_LOST;
  if (unsupported(g, what)) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int fake_nvml_calls(const char* name) {
  std::lock_guard lock(mu);
  return calls[name];
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard lock(mu);
  // A fresh library: no XID delivered yet, no call counted.
  devices.clear();
  calls.clear();
  ++calls["nvmlInit_v2"];
  if (!std::getenv("FAKE_NVML_STATE")) return NVML_ERROR_DRIVER_NOT_LOADED;
  return state().value("init", NVML_SUCCESS);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard lock(mu);
  ++calls["nvmlShutdown"];
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(
    const char* pciBusId, nvmlDevice_t* device) {
  std::lock_guard lock(mu);
  ++calls["nvmlDeviceGetHandleByPciBusId_v2"];
  if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
  const json s = state();
  if (!s.contains("gpus") || !s["gpus"].contains(pciBusId)) return NVML_ERROR_NOT_FOUND;
  nvmlDevice_st& d = devices[pciBusId];
  d.pci = pciBusId;
  *device = &d;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEccErrors(
    nvmlDevice_t device, nvmlMemoryErrorType_t errorType, nvmlEccCounterType_t counterType,
    unsigned long long* eccCounts) {
  std::lock_guard lock(mu);
  json g;
  if (const nvmlReturn_t rc = query("nvmlDeviceGetTotalEccErrors", device, "ecc", g)) return rc;
  if (errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counterType != NVML_VOLATILE_ECC) {
    return NVML_ERROR_INVALID_ARGUMENT;  // the agent asks for nothing else
  }
  *eccCounts = g.value("ecc_uncorrected", 0ULL);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(
    nvmlDevice_t device, nvmlEnableState_t* isPending) {
  std::lock_guard lock(mu);
  json g;
  if (const nvmlReturn_t rc = query("nvmlDeviceGetRetiredPagesPendingStatus", device, "retired", g))
    return rc;
  *isPending = g.value("retired_pages_pending", false) ? NVML_FEATURE_ENABLED : 0;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetRemappedRows(
    nvmlDevice_t device, unsigned int* corrRows, unsigned int* uncRows, unsigned int* isPending,
    unsigned int* failureOccurred) {
  std::lock_guard lock(mu);
  json g;
  if (const nvmlReturn_t rc = query("nvmlDeviceGetRemappedRows", device, "remap", g)) return rc;
  *corrRows = 0;
  *uncRows = 0;
  *isPending = g.value("remap_pending", false) ? 1 : 0;
  *failureOccurred = g.value("remap_failed", false) ? 1 : 0;
  return NVML_SUCCESS;
}
#endif

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  std::lock_guard lock(mu);
  ++calls["nvmlEventSetCreate"];
  *set = new nvmlEventSet_st;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceRegisterEvents(
    nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
  std::lock_guard lock(mu);
  json g;
  if (const nvmlReturn_t rc = query("nvmlDeviceRegisterEvents", device, "events", g)) return rc;
  if (!set || eventTypes != nvmlEventTypeXidCriticalError) return NVML_ERROR_INVALID_ARGUMENT;
  set->devices.push_back(device);
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD
__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set,
                                                                        nvmlEventData_t* data,
                                                                        unsigned int timeoutms) {
  std::lock_guard lock(mu);
  ++calls["nvmlEventSetWait_v2"];
  if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
  // The agent never waits; a fake that had to would sleep here.
  if (timeoutms != 0) return NVML_ERROR_INVALID_ARGUMENT;
  for (nvmlDevice_st* d : set->devices) {
    const json g = gpu_state(d);
    const json xids = g.value("xids", json::array());
    if (d->delivered >= xids.size()) continue;
    *data = nvmlEventData_t{};
    data->device = d;
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = xids[d->delivered++].get<unsigned long long>();
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;
}
#endif

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  std::lock_guard lock(mu);
  ++calls["nvmlEventSetFree"];
  delete set;
  return NVML_SUCCESS;
}

}  // extern "C"
