// The GPUs a CUDA program started by the agent would see, numbered as it
// would number them, found without CUDA or NVML: --numa-binding needs the
// PCI address of CUDA device i (torchrun asks torch.cuda for it in the
// agent), and the agent does not link CUDA.
//
// The set is the NVIDIA driver's: one directory per GPU under
// /proc/driver/nvidia/gpus/, named by its PCI address. That is also right in
// a container, where the NVIDIA container runtime shows only the
// container's GPUs there, while /sys/bus/pci lists every GPU of the host.
// GPUs the driver excludes ("GPU Excluded: Yes") are left out, as CUDA
// leaves them out.
//
// The order is PCI bus order. It is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID
// (which most clusters set), and on a node of identical GPUs also under
// CUDA's default, FASTEST_FIRST, which only moves faster models ahead. On a
// node of mixed models without PCI_BUS_ID, CUDA may number them otherwise;
// the list then carries a warning.
//
// CUDA_VISIBLE_DEVICES selects and reorders as CUDA does: indices into that
// order and GPU UUIDs (or unique prefixes of them, "GPU-8a3f"), read up to
// the first entry that names no GPU or repeats one; set but empty, no GPU.
// MIG instances ("MIG-...") cannot be mapped to a GPU without NVML: an
// error.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace elasticrun::agent {

struct CudaDevice {
  std::string pci_address;  // as in /sys/bus/pci/devices: "0000:1b:00.0"
  std::string uuid;         // "GPU-..." from the driver; empty if it says none
  std::string model;        // "NVIDIA H100 80GB HBM3"; empty if it says none
};

struct CudaDevices {
  std::vector<CudaDevice> devices;  // index: CUDA device index
  std::string warning;              // why the order may not be CUDA's; empty if it is
};

// Reads <root>/proc/driver/nvidia/gpus. root is "/" except in tests; env
// holds CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as the workers get them.
// No driver directory: no devices. Throws Error for a MIG entry in
// CUDA_VISIBLE_DEVICES.
CudaDevices cuda_devices(const std::filesystem::path& root,
                         const std::map<std::string, std::string>& env);

// How many GPUs a worker's torch.cuda.device_count() finds, for
// --nproc-per-node gpu: cuda_devices()'s. Without the driver's directory
// the device nodes <root>/dev/nvidia<N> count, whatever their numbers (a
// container may have only nvidia2 and nvidia3). When CUDA_VISIBLE_DEVICES
// cannot be applied to a list of GPUs (no driver's directory, or a MIG
// instance, which only NVML could map), its entries count, up to the
// number of GPUs.
int cuda_device_count(const std::filesystem::path& root,
                      const std::map<std::string, std::string>& env);

}  // namespace elasticrun::agent
