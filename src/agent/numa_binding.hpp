// --numa-binding: the CPUs each local rank's worker is bound to, as torchrun
// (PyTorch 2.15, torch/numa/binding.py) chooses them. The GPU of local rank
// i is CUDA device i (cuda_devices.hpp); its NUMA node is its PCI device's
// numa_node in sysfs (-1, a machine without NUMA, meaning node 0). Every set
// is cut down to the CPUs the agent itself may run on.
//
//   node          every CPU of the GPU's NUMA node
//   socket        every CPU of the NUMA nodes of the GPU's socket (the
//                 physical package of the node's lowest CPU)
//   exclusive     the node's physical cores split evenly, in order, among the
//                 node's GPUs (the first ones get one more when they do not
//                 divide); a core brings all its hardware threads
//   core-complex  one group of CPUs sharing the highest-level cache (an L3,
//                 a core complex) of the node: the largest first, then the
//                 lowest CPU; the node's k-th GPU gets group k mod #groups
//
// Anything it cannot work out (no GPU, fewer GPUs than local ranks, a
// missing sysfs file, an empty set) is an error, as in torchrun, whose
// launch fails. The agent applies the sets with sched_setaffinity in each
// worker before its exec (SpawnSpec::cpu_affinity), which is what torchrun
// gets by prefixing the command with `numactl --physcpubind`.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cuda_devices.hpp"

namespace elasticrun::agent {

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex" (torchrun's spellings).
std::optional<NumaMode> numa_mode_from_string(std::string_view name);
const char* numa_mode_name(NumaMode mode);

using CpuSet = std::vector<int>;  // ascending, distinct

class NumaBinding {
 public:
  // root: where sys/ and proc/ are read, "/" except in tests (and under
  // ELASTICRUN_TEST_SYSFS_ROOT, which only the integration suite sets).
  // env: the workers' base environment (CUDA_VISIBLE_DEVICES,
  // CUDA_DEVICE_ORDER). allowed: the CPUs the agent may use, its
  // sched_getaffinity. Throws Error when it cannot read the GPUs.
  NumaBinding(NumaMode mode, std::filesystem::path root,
              const std::map<std::string, std::string>& env, CpuSet allowed);

  // The CPUs of the worker of local_rank. Throws Error naming the rank, its
  // GPU and what is missing when there is no answer.
  CpuSet cpus_for(int local_rank) const;

  const CudaDevices& gpus() const { return gpus_; }
  // The NUMA node of CUDA device `device`.
  int numa_node_of(int device) const;

 private:
  CpuSet node_cpus(int node) const;
  CpuSet socket_cpus(int node) const;
  CpuSet exclusive_cpus(int device, int node) const;
  CpuSet core_complex_cpus(int device, int node) const;
  int socket_of_node(int node) const;
  std::vector<int> devices_on_node(int node) const;
  CpuSet read_cpus(const std::filesystem::path& relative) const;
  std::string read_file(const std::filesystem::path& relative) const;
  int read_int(const std::filesystem::path& relative) const;
  CpuSet max_level_cache_cpus(int cpu) const;

  NumaMode mode_;
  std::filesystem::path root_;
  CudaDevices gpus_;
  CpuSet allowed_;
};

// The CPU set of every local rank 0..nproc-1 under mode, with the agent's
// own affinity; logs each set (agent logger). Throws Error.
std::vector<CpuSet> numa_cpu_sets(NumaMode mode, int nproc, const std::filesystem::path& root,
                                  const std::map<std::string, std::string>& env);

}  // namespace elasticrun::agent
