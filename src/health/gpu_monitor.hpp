// GPU health from the NVIDIA driver's own error reports: XID events, the
// uncorrectable ECC error count, and the memory's retired pages and
// remapped rows. Pure logic: the agent reads the driver (agent/nvml,
// agent/gpu_watch) and passes the readings with the time they were taken;
// nothing here reads a clock, a file or a library.
//
// What is a fault (kind kGpu, the node's: local rank -1), in one attempt:
//   - an XID event of the hardware set (xid_info: the GPU, its memory or an
//     NVLink needs a reset, or the node a drain);
//   - an uncorrectable ECC error count that rose during the attempt (above
//     the attempt's baseline: the last reading taken before it began, or
//     its first one);
//   - a row remapping that failed (the memory has a bad row it cannot
//     replace: a reset does not mend it);
//   - a GPU that NVML reports lost (fallen off the bus, or otherwise gone).
// Readings taken before the attempt began never fault it: the XIDs in them
// belong to the attempt before (whose workers they often killed) or to the
// time between attempts, and are logged as notes; a GPU still broken shows
// it again in the attempt's own readings (lost, a remap failure).
//
// What is a note (logged once, never a fault): retired pages or remapped
// rows pending (they take effect at the next GPU reset, and until then the
// driver keeps new allocations off the bad memory: the GPU needs a reset
// when convenient, not the job a restart), XIDs outside the hardware set.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "health/fault.hpp"

namespace elasticrun::health {

// A GPU as the workers see it.
struct GpuDevice {
  std::string pci_address;  // "0000:1b:00.0"
  int cuda_index = -1;      // its CUDA device index in the workers' numbering
};

// One look at one GPU. A reading the driver could not give (not supported
// on this GPU, missing from this NVML, a failed call) is nullopt and not
// judged.
struct GpuReading {
  std::optional<uint64_t> ecc_uncorrected;  // volatile: since the driver loaded
  std::optional<bool> retired_pages_pending;
  std::optional<bool> remap_pending;
  std::optional<bool> remap_failed;
  std::vector<uint64_t> xids;  // XID events since the previous reading, oldest first
  bool lost = false;           // NVML: the GPU is lost
};

// One look at every GPU, readings[i] of GpuDevice i.
struct GpuSnapshot {
  std::chrono::steady_clock::time_point taken;
  std::vector<GpuReading> readings;
};

// An XID NVIDIA documents, with what it means and whether it is a fault.
struct XidInfo {
  uint64_t xid;
  bool fault;
  const char* meaning;
};
// nullopt: an XID this table does not know (the application's own errors,
// 13, 31, 43, 45, ..., are among them): a note.
std::optional<XidInfo> xid_info(uint64_t xid);

struct GpuVerdict {
  std::optional<Fault> fault;
  std::vector<std::string> notes;  // one line each, to log
};

class GpuMonitor {
 public:
  explicit GpuMonitor(std::vector<GpuDevice> gpus);

  const std::vector<GpuDevice>& gpus() const { return gpus_; }

  // An attempt begins at `start`: readings taken from then on are its own,
  // and it may get a fault of its own.
  void begin_attempt(std::chrono::steady_clock::time_point start);
  // Judges readings in the order taken. Returns at most one fault per
  // attempt (the first found: a GPU's XID before its lost state, ECC count
  // and remap failure), and none outside an attempt. Each note is given
  // once: a pending flag when it becomes set; an XID that is not the fault
  // the first time a GPU reports it.
  GpuVerdict observe(const GpuSnapshot& snapshot);

 private:
  struct State {
    std::optional<uint64_t> ecc_base;  // the attempt's baseline
    std::optional<uint64_t> ecc_last;  // the latest count read
    bool retired_noted = false;
    bool remap_noted = false;
    std::set<uint64_t> xids_noted;
  };
  std::string name(size_t gpu) const;
  // The reading's fault, if any; fault_xid: which of its XIDs it is.
  std::optional<Fault> judge(size_t gpu, const GpuReading& r, const State& s,
                             std::optional<size_t>& fault_xid) const;

  std::vector<GpuDevice> gpus_;
  std::vector<State> states_;
  std::optional<std::chrono::steady_clock::time_point> attempt_start_;
  bool faulted_ = false;
};

}  // namespace elasticrun::health
