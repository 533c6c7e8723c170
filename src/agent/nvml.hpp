// NVML, the NVIDIA driver's management library, as GPU health reads it:
// opened at run time (dlopen of libnvidia-ml.so.1, which the driver
// installs), so the agent has no link dependency on it and runs the same
// where there is no driver. Its ABI is declared in agent/nvml_abi.hpp.
//
// Each reading needs its own functions, resolved separately: a function
// this NVML lacks disables only its reading, and so does a call that the
// GPU does not support (ECC disabled, retired pages on GPUs that remap rows
// instead, events in some containers): it is not called again for that
// GPU. XID events come through one event set, drained without waiting
// (nvmlEventSetWait_v2 with a timeout of 0).
//
// Not thread-safe: one thread reads (GpuWatch's). NVML calls on a GPU in
// trouble can block for seconds, which is why that thread is not the loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_watch.hpp"
#include "agent/nvml_abi.hpp"

namespace elasticrun::agent {

class Nvml final : public GpuSource {
 public:
  // Loads `library` (a file name the dynamic linker searches for, or a
  // path), resolves its functions and initialises it. Null when it cannot,
  // with *why saying why in a few words.
  static std::unique_ptr<Nvml> open(const std::string& library, std::string* why);
  ~Nvml() override;
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The GPUs to read, by PCI address ("0000:1b:00.0"); registers their XID
  // events. Returns, per address, why it cannot be read (empty: it can);
  // read() answers for those that can, in order. Call once.
  std::vector<std::string> attach(const std::vector<std::string>& pci_addresses);
  // What the GPUs can be read for ("XID events, ECC errors, ..."): a reading
  // counts while some GPU still gives it. Empty: nothing.
  std::string readable() const;

  std::vector<health::GpuReading> read() override;

 private:
  struct Api;
  struct Gpu {
    nvmlDevice_t handle = nullptr;
    bool ecc = true, retired = true, remap = true, events = false;
  };
  Nvml(void* lib, std::unique_ptr<Api> api);
  std::string error_text(nvmlReturn_t rc) const;
  // Whether the reading can be tried again after this answer.
  bool keep(nvmlReturn_t rc, size_t gpu, const char* what, health::GpuReading& r) const;
  void read_events(std::vector<health::GpuReading>& out);

  void* lib_;
  std::unique_ptr<Api> api_;
  nvmlEventSet_t events_ = nullptr;
  std::vector<Gpu> gpus_;
  std::vector<std::string> addresses_;  // of gpus_
};

}  // namespace elasticrun::agent
