// CUDA device numbering without CUDA (agent/cuda_devices): the driver's GPU
// list in PCI bus order, narrowed and reordered by CUDA_VISIBLE_DEVICES.
#include "agent/cuda_devices.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"
#include "fake_sysfs.hpp"

using Catch::Matchers::Contains;
using elasticrun::agent::cuda_device_count;
using elasticrun::agent::cuda_devices;
using elasticrun::test::FakeSysfs;
using Env = std::map<std::string, std::string>;

namespace {

std::vector<std::string> addresses(const FakeSysfs& sys, const Env& env = {}) {
  std::vector<std::string> out;
  for (const auto& d : cuda_devices(sys.root(), env).devices) out.push_back(d.pci_address);
  return out;
}

// Four GPUs, created out of bus order; UUIDs GPU-aaaa-0 ... GPU-dddd-3 in bus order.
void four_gpus(const FakeSysfs& sys) {
  sys.gpu("0000:9a:00.0", 1, "GPU-cccc-2");
  sys.gpu("0000:1b:00.0", 0, "GPU-aaaa-0");
  sys.gpu("0000:cb:00.0", 1, "GPU-dddd-3");
  sys.gpu("0000:3d:00.0", 0, "GPU-bbbb-1");
}

}  // namespace

TEST_CASE("CUDA devices are the driver's GPUs in PCI bus order", "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  CHECK(addresses(sys) ==
        std::vector<std::string>{"0000:1b:00.0", "0000:3d:00.0", "0000:9a:00.0", "0000:cb:00.0"});
  const auto d = cuda_devices(sys.root(), {}).devices;
  CHECK(d[0].uuid == "GPU-aaaa-0");
  CHECK(d[0].model == "NVIDIA H100 80GB HBM3");
}

TEST_CASE("PCI addresses sort by number, a long domain after short ones", "[cuda_devices]") {
  FakeSysfs sys;
  sys.gpu("10000:01:00.0", 0);
  sys.gpu("0001:05:00.0", 0);
  sys.gpu("0000:ff:00.0", 0);
  CHECK(addresses(sys) ==
        std::vector<std::string>{"0000:ff:00.0", "0001:05:00.0", "10000:01:00.0"});
}

TEST_CASE("a GPU the driver excludes is not a CUDA device", "[cuda_devices]") {
  FakeSysfs sys;
  sys.gpu("0000:1b:00.0", 0, "GPU-a", "NVIDIA H100 80GB HBM3", true);
  sys.gpu("0000:3d:00.0", 0, "GPU-b");
  CHECK(addresses(sys) == std::vector<std::string>{"0000:3d:00.0"});
}

TEST_CASE("without the NVIDIA driver's directory there are no CUDA devices", "[cuda_devices]") {
  FakeSysfs sys;
  sys.file("sys/bus/pci/devices/0000:1b:00.0/numa_node", "0\n");
  CHECK(addresses(sys).empty());
}

TEST_CASE("CUDA_VISIBLE_DEVICES picks and orders GPUs by index and by UUID prefix",
          "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "2,0"}}) ==
        std::vector<std::string>{"0000:9a:00.0", "0000:1b:00.0"});
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "GPU-dddd, 1"}}) ==
        std::vector<std::string>{"0000:cb:00.0", "0000:3d:00.0"});
}

TEST_CASE("CUDA_VISIBLE_DEVICES is read up to its first entry that names no GPU or one again",
          "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  const std::vector<std::string> just_3d{"0000:3d:00.0"};
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "1,7,0"}}) == just_3d);
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "1,1,0"}}) == just_3d);
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "1,GPU-,0"}}) == just_3d);  // ambiguous prefix
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "1,GPU-eeee,0"}}) == just_3d);
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "1,-1,0"}}) == just_3d);
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "1,0x2"}}) == just_3d);
}

TEST_CASE("an empty CUDA_VISIBLE_DEVICES hides every GPU, as in CUDA", "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", ""}}).empty());
  CHECK(addresses(sys, {{"CUDA_VISIBLE_DEVICES", "-1"}}).empty());
}

TEST_CASE("a MIG instance in CUDA_VISIBLE_DEVICES is an error, not a guess", "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  REQUIRE_THROWS_WITH(cuda_devices(sys.root(), {{"CUDA_VISIBLE_DEVICES", "MIG-1234"}}),
                      Contains("MIG") && Contains("NVML"));
}

TEST_CASE("mixed GPU models warn that CUDA may number them otherwise, unless PCI_BUS_ID is set",
          "[cuda_devices]") {
  FakeSysfs sys;
  sys.gpu("0000:1b:00.0", 0, "GPU-a", "NVIDIA A100-SXM4-80GB");
  sys.gpu("0000:3d:00.0", 0, "GPU-b", "NVIDIA H100 80GB HBM3");
  CHECK_THAT(cuda_devices(sys.root(), {}).warning, Contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  CHECK_THAT(cuda_devices(sys.root(), {{"CUDA_DEVICE_ORDER", "FASTEST_FIRST"}}).warning,
             Contains("2 models"));
  CHECK(cuda_devices(sys.root(), {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}).warning.empty());
  // Only the visible ones count.
  CHECK(cuda_devices(sys.root(), {{"CUDA_VISIBLE_DEVICES", "1"}}).warning.empty());
}

TEST_CASE("identical GPUs give no warning: CUDA's default order is bus order then",
          "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  CHECK(cuda_devices(sys.root(), {}).warning.empty());
}

TEST_CASE("--nproc-per-node gpu counts the driver's GPUs that CUDA_VISIBLE_DEVICES shows",
          "[cuda_devices]") {
  FakeSysfs sys;
  four_gpus(sys);
  sys.file("dev/nvidia0", "");  // the device nodes do not count when the driver lists GPUs
  CHECK(cuda_device_count(sys.root(), {}) == 4);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", "3,GPU-aaaa"}}) == 2);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", "1,7,2"}}) == 1);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", ""}}) == 0);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", "MIG-1,MIG-2"}}) == 2);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", "MIG-1,MIG-2,MIG-3,MIG-4,MIG-5"}}) ==
        4);
}

TEST_CASE("without the driver's list the device nodes count, whatever their numbers",
          "[cuda_devices]") {
  FakeSysfs sys;
  // A container given the host's third and fourth GPU, and the driver's other nodes.
  for (const char* node : {"nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-caps"}) {
    sys.file(std::string("dev/") + node, "");
  }
  CHECK(cuda_device_count(sys.root(), {}) == 2);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", "0"}}) == 1);
  CHECK(cuda_device_count(sys.root(), {{"CUDA_VISIBLE_DEVICES", "0,1,2"}}) == 2);
  // No GPU at all: none, whatever CUDA_VISIBLE_DEVICES says.
  FakeSysfs empty;
  CHECK(cuda_device_count(empty.root(), {}) == 0);
  CHECK(cuda_device_count(empty.root(), {{"CUDA_VISIBLE_DEVICES", "0"}}) == 0);
}
