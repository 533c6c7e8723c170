#include "agent/nvml.hpp"

#include <dlfcn.h>

#include <cstring>

#include "util/logging.hpp"

namespace elasticrun::agent {

// Every function the agent calls; null where this NVML lacks it.
struct Nvml::Api {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  nvmlDeviceGetHandleByPciBusId_v2_fn handle_by_pci = nullptr;
  nvmlDeviceGetTotalEccErrors_fn ecc = nullptr;
  nvmlDeviceGetRetiredPagesPendingStatus_fn retired = nullptr;
  nvmlDeviceGetRemappedRows_fn remapped = nullptr;
  nvmlEventSetCreate_fn event_set_create = nullptr;
  nvmlDeviceRegisterEvents_fn register_events = nullptr;
  nvmlEventSetWait_v2_fn event_set_wait = nullptr;
  nvmlEventSetFree_fn event_set_free = nullptr;
};

namespace {

// dlsym's object pointer as a function pointer, without the cast that
// ISO C++ only conditionally supports.
template <typename Fn>
void resolve(void* lib, const char* name, Fn& fn) {
  void* p = ::dlsym(lib, name);
  static_assert(sizeof(p) == sizeof(fn));
  std::memcpy(&fn, &p, sizeof fn);
}

// At most this many events per read: a GPU in an XID storm (an NVLink
// flapping) must not keep the reading thread draining forever.
constexpr int kMaxEventsPerRead = 256;

}  // namespace

std::unique_ptr<Nvml> Nvml::open(const std::string& library, std::string* why) {
  // RTLD_LOCAL: NVML's symbols are ours to look up, nobody else's to bind to.
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = ::dlerror();
    *why = "cannot load NVML: " + std::string(err ? err : library + ": no reason given");
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  resolve(lib, "nvmlInit_v2", api->init);
  resolve(lib, "nvmlShutdown", api->shutdown);
  resolve(lib, "nvmlErrorString", api->error_string);
  resolve(lib, "nvmlDeviceGetHandleByPciBusId_v2", api->handle_by_pci);
  resolve(lib, "nvmlDeviceGetTotalEccErrors", api->ecc);
  resolve(lib, "nvmlDeviceGetRetiredPagesPendingStatus", api->retired);
  resolve(lib, "nvmlDeviceGetRemappedRows", api->remapped);
  resolve(lib, "nvmlEventSetCreate", api->event_set_create);
  resolve(lib, "nvmlDeviceRegisterEvents", api->register_events);
  resolve(lib, "nvmlEventSetWait_v2", api->event_set_wait);
  resolve(lib, "nvmlEventSetFree", api->event_set_free);
  if (!api->init || !api->handle_by_pci) {
    *why = library + " has no " + (api->init ? "nvmlDeviceGetHandleByPciBusId_v2" : "nvmlInit_v2");
    return nullptr;  // the library stays loaded: see ~Nvml
  }
  std::unique_ptr<Nvml> nvml(new Nvml(lib, std::move(api)));
  if (const nvmlReturn_t rc = nvml->api_->init(); rc != NVML_SUCCESS) {
    *why = "nvmlInit_v2 failed: " + nvml->error_text(rc);
    nvml->api_->shutdown = nullptr;  // nothing to shut down
    return nullptr;
  }
  return nvml;
}

Nvml::Nvml(void* lib, std::unique_ptr<Api> api) : lib_(lib), api_(std::move(api)) {}

// The library is not unloaded: NVML may keep threads or exit handlers of
// its own, and unmapping their code under them is a crash at exit. It is
// loaded once per agent.
Nvml::~Nvml() {
  if (events_ && api_->event_set_free) api_->event_set_free(events_);
  if (api_->shutdown) api_->shutdown();
  (void)lib_;
}

std::string Nvml::error_text(nvmlReturn_t rc) const {
  const char* text = api_->error_string ? api_->error_string(rc) : nullptr;
  return std::string(text ? text : "NVML error") + " (" + std::to_string(rc) + ")";
}

std::vector<std::string> Nvml::attach(const std::vector<std::string>& pci_addresses) {
  auto log = util::logger("health");
  std::vector<std::string> problems;
  if (api_->event_set_create && api_->register_events && api_->event_set_wait) {
    if (const nvmlReturn_t rc = api_->event_set_create(&events_); rc != NVML_SUCCESS) {
      log->debug("GPU health: no XID events: nvmlEventSetCreate: {}", error_text(rc));
      events_ = nullptr;
    }
  }
  for (const auto& address : pci_addresses) {
    Gpu gpu;
    if (const nvmlReturn_t rc = api_->handle_by_pci(address.c_str(), &gpu.handle);
        rc != NVML_SUCCESS) {
      problems.push_back("NVML does not find it: " + error_text(rc));
      continue;
    }
    gpu.ecc = api_->ecc != nullptr;
    gpu.retired = api_->retired != nullptr;
    gpu.remap = api_->remapped != nullptr;
    if (events_) {
      const nvmlReturn_t rc =
          api_->register_events(gpu.handle, nvmlEventTypeXidCriticalError, events_);
      gpu.events = rc == NVML_SUCCESS;
      if (!gpu.events) log->debug("GPU {}: no XID events: {}", address, error_text(rc));
    }
    problems.emplace_back();
    gpus_.push_back(gpu);
    addresses_.push_back(address);
  }
  return problems;
}

std::string Nvml::readable() const {
  bool events = false, ecc = false, retired = false, remap = false;
  for (const auto& g : gpus_) {
    events = events || g.events;
    ecc = ecc || g.ecc;
    retired = retired || g.retired;
    remap = remap || g.remap;
  }
  std::string out;
  const auto add = [&out](bool on, const char* what) {
    if (on) out += (out.empty() ? "" : ", ") + std::string(what);
  };
  add(events, "XID events");
  add(ecc, "uncorrectable ECC errors");
  add(retired, "retired pages");
  add(remap, "remapped rows");
  return out;
}

bool Nvml::keep(nvmlReturn_t rc, size_t gpu, const char* what, health::GpuReading& r) const {
  if (rc == NVML_SUCCESS) return true;
  if (rc == NVML_ERROR_GPU_IS_LOST) {
    r.lost = true;
    return true;
  }
  // The GPU will never answer this: not supported (ECC off, a GPU that
  // remaps rows rather than retiring pages), not ours to ask, not in this
  // library. Anything else may pass (a timeout of a busy driver).
  const bool never = rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_NO_PERMISSION ||
                     rc == NVML_ERROR_FUNCTION_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT;
  util::logger("health")->debug("GPU {}: {}: {}{}", addresses_[gpu], what, error_text(rc),
                                never ? "; not read again" : "");
  return !never;
}

std::vector<health::GpuReading> Nvml::read() {
  std::vector<health::GpuReading> out(gpus_.size());
  for (size_t i = 0; i < gpus_.size(); ++i) {
    Gpu& g = gpus_[i];
    health::GpuReading& r = out[i];
    if (g.ecc) {
      unsigned long long count = 0;
      const nvmlReturn_t rc =
          api_->ecc(g.handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count);
      if (rc == NVML_SUCCESS) r.ecc_uncorrected = count;
      g.ecc = keep(rc, i, "nvmlDeviceGetTotalEccErrors", r);
    }
    if (g.retired) {
      nvmlEnableState_t pending = 0;
      const nvmlReturn_t rc = api_->retired(g.handle, &pending);
      if (rc == NVML_SUCCESS) r.retired_pages_pending = pending == NVML_FEATURE_ENABLED;
      g.retired = keep(rc, i, "nvmlDeviceGetRetiredPagesPendingStatus", r);
    }
    if (g.remap) {
      unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      const nvmlReturn_t rc = api_->remapped(g.handle, &corrected, &uncorrected, &pending, &failed);
      if (rc == NVML_SUCCESS) {
        r.remap_pending = pending != 0;
        r.remap_failed = failed != 0;
      }
      g.remap = keep(rc, i, "nvmlDeviceGetRemappedRows", r);
    }
  }
  read_events(out);
  return out;
}

void Nvml::read_events(std::vector<health::GpuReading>& out) {
  if (!events_) return;
  for (int n = 0; n < kMaxEventsPerRead; ++n) {
    nvmlEventData_t data{};
    const nvmlReturn_t rc = api_->event_set_wait(events_, &data, 0);
    if (rc == NVML_ERROR_TIMEOUT) return;  // none queued
    if (rc != NVML_SUCCESS) {
      // GPU_IS_LOST names no GPU here; the GPU's own calls above say which.
      util::logger("health")->debug("GPU health: nvmlEventSetWait_v2: {}", error_text(rc));
      return;
    }
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (gpus_[i].handle == data.device) out[i].xids.push_back(data.eventData);
    }
  }
}

}  // namespace elasticrun::agent
