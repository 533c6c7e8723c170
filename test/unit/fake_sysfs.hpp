// A fake /sys and /proc/driver/nvidia under a temp directory, as much of
// them as --numa-binding reads: NVIDIA GPUs with their PCI NUMA node, NUMA
// nodes with their CPUs, and each CPU's package, hardware-thread siblings
// and caches.
#pragma once

#include <filesystem>
#include <string>

#include "process_helpers.hpp"
#include "temp_dir.hpp"

namespace elasticrun::test {

class FakeSysfs {
 public:
  const std::filesystem::path& root() const { return dir_.path(); }

  void file(const std::string& relative, const std::string& text) const {
    const std::filesystem::path path = dir_.path() / relative;
    std::filesystem::create_directories(path.parent_path());
    write_text(path.string(), text);
  }

  // A GPU as the NVIDIA driver lists it, and its PCI device's numa_node.
  void gpu(const std::string& address, int numa_node, const std::string& uuid = "",
           const std::string& model = "NVIDIA H100 80GB HBM3", bool excluded = false) const {
    std::string info = "Model: \t\t " + model + "\nIRQ:   \t\t 42\n";
    if (!uuid.empty()) info += "GPU UUID: \t " + uuid + "\n";
    info += "Bus Type: \t PCIe\nBus Location: \t " + address +
            "\nDevice Minor: \t 0\nGPU Excluded:\t " + (excluded ? "Yes" : "No") + "\n";
    file("proc/driver/nvidia/gpus/" + address + "/information", info);
    file("sys/bus/pci/devices/" + address + "/numa_node", std::to_string(numa_node) + "\n");
  }

  void numa_node(int node, const std::string& cpulist) const {
    file("sys/devices/system/node/node" + std::to_string(node) + "/cpulist", cpulist + "\n");
  }

  void possible_nodes(const std::string& list) const {
    file("sys/devices/system/node/possible", list + "\n");
  }

  // A logical CPU: its socket, the CPUs of its physical core, and its
  // caches: L1 data and instruction and L2 of its own core, and an L3
  // shared with l3_shared (empty: none).
  void cpu(int cpu, int package, const std::string& core_siblings,
           const std::string& l3_shared) const {
    const std::string base = "sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/";
    file(base + "topology/physical_package_id", std::to_string(package) + "\n");
    file(base + "topology/thread_siblings_list", core_siblings + "\n");
    cache(cpu, 0, 1, "Data", core_siblings);
    cache(cpu, 1, 1, "Instruction", core_siblings);
    cache(cpu, 2, 2, "Unified", core_siblings);
    if (!l3_shared.empty()) cache(cpu, 3, 3, "Unified", l3_shared);
  }

  void cache(int cpu, int index, int level, const std::string& type,
             const std::string& shared) const {
    const std::string base = "sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" +
                             std::to_string(index) + "/";
    file(base + "level", std::to_string(level) + "\n");
    file(base + "type", type + "\n");
    file(base + "shared_cpu_list", shared + "\n");
  }

 private:
  TempDir dir_{"elasticrun-sysfs"};
};

}  // namespace elasticrun::test
