#include "health/gpu_monitor.hpp"

#include <array>

namespace elasticrun::health {
namespace {

// From NVIDIA's XID catalog ("Xid Errors", docs.nvidia.com/deploy/xid-errors/,
// and its Ampere-and-newer table, analyzing-xid-catalog.html): the XIDs whose
// resolution is a GPU reset, a node reboot or a drain, i.e. the hardware
// (the GPU, its memory, an NVLink, its system processor), not the
// application. The catalog's application errors (13 graphics engine
// exception, 31 memory page fault, 43 GPU stopped processing, 45
// preemptive cleanup, ...) come with the worker's own failure and are not
// listed: a worker that dies of them fails on its own, and one that
// survives them is no reason to stop the job.
//
// Deliberately notes, not faults:
//   63  the driver recorded a page retirement or row remapping: it takes
//       effect at the next reset and the GPU keeps working meanwhile; the
//       uncorrectable error behind it, if any, is a 48/94/95 or a rise of
//       the ECC count, which are faults;
//   92  a high single-bit (corrected) ECC error rate: nothing was lost yet;
//   154 the driver's recovery action changed: it may change to "none" as
//       well (after a reset); the XID that caused it is reported on its own.
constexpr std::array<XidInfo, 12> kXids = {{
    {48, true,
     "a double-bit ECC error: GPU memory returned uncorrectable data; the GPU needs a reset"},
    {63, false,
     "a page retirement or row remapping was recorded: it takes effect at the next GPU reset"},
    {64, true,
     "a page retirement or row remapping could not be recorded: the memory cannot isolate its "
     "bad cells; the GPU needs a reset, and replacing if it recurs"},
    {74, true,
     "an NVLink error: a link to another GPU or NVSwitch failed; the GPU needs a reset, the node "
     "a reboot if that fails"},
    {79, true,
     "the GPU has fallen off the bus: it no longer answers on PCIe; the node needs a drain and a "
     "reboot"},
    {92, false, "a high rate of corrected single-bit ECC errors: the GPU's memory may be failing"},
    {94, true,
     "a contained uncorrectable ECC error: the processes using that memory were stopped; the GPU "
     "needs a reset"},
    {95, true,
     "an uncontained uncorrectable ECC error: every process on the GPU is affected; the GPU needs "
     "a reset"},
    {119, true,
     "a GSP RPC timeout: the GPU's system processor stopped answering the driver; the GPU needs a "
     "reset"},
    {120, true, "a GSP error: the GPU's system processor failed; the GPU needs a reset"},
    {140, true,
     "an unrecovered ECC error: the driver could not offline or remap the failed memory; the GPU "
     "needs a reset"},
    {154, false,
     "the driver changed the GPU's recovery action (nvidia-smi -q shows whether it asks for a "
     "reset, a reboot or a drain)"},
}};

Fault gpu_fault(std::string message) {
  Fault f;
  f.kind = FaultKind::kGpu;
  f.monitor = "gpu";
  f.local_rank = -1;
  f.message = std::move(message);
  return f;
}

std::string xid_text(uint64_t xid) {
  const auto info = xid_info(xid);
  return "XID " + std::to_string(xid) + ": " +
         (info ? info->meaning
               : "not one of the hardware XIDs elasticrun acts on (see NVIDIA's XID catalog)");
}

}  // namespace

std::optional<XidInfo> xid_info(uint64_t xid) {
  for (const auto& x : kXids) {
    if (x.xid == xid) return x;
  }
  return std::nullopt;
}

GpuMonitor::GpuMonitor(std::vector<GpuDevice> gpus)
    : gpus_(std::move(gpus)), states_(gpus_.size()) {}

void GpuMonitor::begin_attempt(std::chrono::steady_clock::time_point start) {
  attempt_start_ = start;
  faulted_ = false;
  // The count as last read is the attempt's baseline until a reading
  // taken before it begins comes in later.
  for (auto& s : states_) s.ecc_base = s.ecc_last;
}

std::string GpuMonitor::name(size_t gpu) const {
  return "GPU " + gpus_[gpu].pci_address + " (CUDA " + std::to_string(gpus_[gpu].cuda_index) + ")";
}

GpuVerdict GpuMonitor::observe(const GpuSnapshot& snapshot) {
  GpuVerdict v;
  const bool in_attempt = attempt_start_ && snapshot.taken >= *attempt_start_;
  for (size_t i = 0; i < gpus_.size() && i < snapshot.readings.size(); ++i) {
    const GpuReading& r = snapshot.readings[i];
    State& s = states_[i];
    std::optional<size_t> fault_xid;
    if (in_attempt && !faulted_ && !v.fault) v.fault = judge(i, r, s, fault_xid);
    if (r.ecc_uncorrected) {
      // A count that fell was reset with the GPU (it counts since the
      // driver last initialised it): it rises from there.
      if (!in_attempt || !s.ecc_base || *r.ecc_uncorrected < *s.ecc_base) {
        s.ecc_base = r.ecc_uncorrected;
      }
      s.ecc_last = r.ecc_uncorrected;
    }
    if (r.retired_pages_pending) {
      if (*r.retired_pages_pending && !s.retired_noted) {
        v.notes.push_back(name(i) +
                          ": retired pages are pending; they are retired at the next GPU reset, "
                          "and until then the driver keeps new allocations off them");
      }
      s.retired_noted = *r.retired_pages_pending;
    }
    if (r.remap_pending) {
      if (*r.remap_pending && !s.remap_noted) {
        v.notes.push_back(name(i) +
                          ": remapped rows are pending; they are remapped at the next GPU reset, "
                          "and until then the driver keeps new allocations off them");
      }
      s.remap_noted = *r.remap_pending;
    }
    // Every other XID once per GPU: an NVLink or an application can raise
    // the same one thousands of times; repeats of the fault's XID are the
    // same incident.
    if (fault_xid) s.xids_noted.insert(r.xids[*fault_xid]);
    for (size_t k = 0; k < r.xids.size(); ++k) {
      const uint64_t xid = r.xids[k];
      if (k == fault_xid || !s.xids_noted.insert(xid).second) continue;
      const auto info = xid_info(xid);
      std::string why = " (not a fault)";
      if (info && info->fault) {
        why = in_attempt ? " (this attempt already has its fault)"
                         : " (before this attempt began: not held against it)";
      }
      v.notes.push_back(name(i) + " reported " + xid_text(xid) + why);
    }
  }
  faulted_ = faulted_ || v.fault.has_value();
  return v;
}

std::optional<Fault> GpuMonitor::judge(size_t gpu, const GpuReading& r, const State& s,
                                       std::optional<size_t>& fault_xid) const {
  for (size_t k = 0; k < r.xids.size(); ++k) {
    const auto info = xid_info(r.xids[k]);
    if (info && info->fault) {
      fault_xid = k;
      return gpu_fault(name(gpu) + " reported " + xid_text(r.xids[k]));
    }
  }
  if (r.lost) {
    return gpu_fault(name(gpu) +
                     " is lost: NVML reports it fallen off the bus or otherwise inaccessible; the "
                     "node needs a drain and a reboot");
  }
  if (r.ecc_uncorrected && s.ecc_base && *r.ecc_uncorrected > *s.ecc_base) {
    return gpu_fault(name(gpu) + ": its uncorrectable ECC error count rose from " +
                     std::to_string(*s.ecc_base) + " to " + std::to_string(*r.ecc_uncorrected) +
                     " during the attempt: GPU memory returned uncorrectable data; the GPU needs "
                     "a reset");
  }
  if (r.remap_failed && *r.remap_failed) {
    return gpu_fault(name(gpu) +
                     ": a row remapping failed: its memory has a bad row it cannot replace; the "
                     "GPU needs replacing");
  }
  return std::nullopt;
}

}  // namespace elasticrun::health
