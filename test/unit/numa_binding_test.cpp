// --numa-binding's CPU sets (agent/numa_binding) on fake sysfs trees, for
// each of torchrun's modes, and the cases where torchrun's launch fails.
#include "agent/numa_binding.hpp"

#include <sched.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "elasticrun/errors.hpp"
#include "fake_sysfs.hpp"
#include "util/cpu_list.hpp"

using Catch::Matchers::Contains;
using elasticrun::agent::NumaBinding;
using elasticrun::agent::NumaMode;
using elasticrun::test::FakeSysfs;

namespace {

std::vector<int> range(int first, int last) {
  std::vector<int> v;
  for (int c = first; c <= last; ++c) v.push_back(c);
  return v;
}

std::string list(const std::vector<int>& v) {
  return elasticrun::util::format_cpu_list(v);
}

// Two sockets of two NUMA nodes each; 16 cores with two hardware threads
// (core c: CPUs c and c+16); a core complex (shared L3) per two cores.
// Node 0: cores 0-3, node 1: 4-7 (socket 0), node 2: 8-11, node 3: 12-15
// (socket 1). GPUs: two on node 0, one on node 2, one on node 3.
void two_sockets(const FakeSysfs& sys) {
  sys.possible_nodes("0-3");
  for (int node = 0; node < 4; ++node) {
    const int c = 4 * node;
    sys.numa_node(node, list(range(c, c + 3)) + "," + list(range(c + 16, c + 19)));
  }
  for (int core = 0; core < 16; ++core) {
    const int first = core - core % 2;  // of its core complex
    const std::string l3 = list({first, first + 1, first + 16, first + 17});
    const std::string siblings = std::to_string(core) + "," + std::to_string(core + 16);
    sys.cpu(core, core / 8, siblings, l3);
    sys.cpu(core + 16, core / 8, siblings, l3);
  }
  sys.gpu("0000:1b:00.0", 0);
  sys.gpu("0000:3d:00.0", 0);
  sys.gpu("0000:9a:00.0", 2);
  sys.gpu("0000:cb:00.0", 3);
}

std::vector<std::string> sets(NumaMode mode, const FakeSysfs& sys,
                              const std::vector<int>& allowed = range(0, 31), int ranks = 4) {
  NumaBinding b(mode, sys.root(), {}, allowed);
  std::vector<std::string> out;
  for (int r = 0; r < ranks; ++r) out.push_back(list(b.cpus_for(r)));
  return out;
}

using Lists = std::vector<std::string>;

}  // namespace

TEST_CASE("node binds each rank to every CPU of its GPU's NUMA node", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  CHECK(sets(NumaMode::kNode, sys) == Lists{"0-3,16-19", "0-3,16-19", "8-11,24-27", "12-15,28-31"});
}

TEST_CASE("socket binds each rank to the CPUs of every NUMA node of its GPU's socket", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  CHECK(sets(NumaMode::kSocket, sys) ==
        Lists{"0-7,16-23", "0-7,16-23", "8-15,24-31", "8-15,24-31"});
}

TEST_CASE("exclusive splits a node's physical cores among its GPUs, hardware threads together",
          "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  CHECK(sets(NumaMode::kExclusive, sys) ==
        Lists{"0-1,16-17", "2-3,18-19", "8-11,24-27", "12-15,28-31"});
}

TEST_CASE("core-complex gives each GPU of a node its own group of CPUs sharing an L3", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  CHECK(sets(NumaMode::kCoreComplex, sys) ==
        Lists{"0-1,16-17", "2-3,18-19", "8-9,24-25", "12-13,28-29"});
}

TEST_CASE("every set is cut to the CPUs the agent may run on", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  std::vector<int> allowed = range(0, 15);
  for (int c = 18; c <= 31; ++c) allowed.push_back(c);  // not 16, 17
  CHECK(sets(NumaMode::kNode, sys, allowed)[0] == "0-3,18-19");
  CHECK(sets(NumaMode::kSocket, sys, allowed)[0] == "0-7,18-23");
  // Cores are still told apart by their lowest thread, allowed or not.
  CHECK(sets(NumaMode::kExclusive, sys, allowed)[0] == "0-1");
  // The fuller core complex comes first now.
  CHECK(sets(NumaMode::kCoreComplex, sys, allowed)[0] == "2-3,18-19");
  CHECK(sets(NumaMode::kCoreComplex, sys, allowed)[1] == "0-1");
}

TEST_CASE("exclusive gives the first GPUs one core more when the cores do not divide", "[numa]") {
  FakeSysfs sys;
  sys.possible_nodes("0");
  sys.numa_node(0, "0-4");
  for (int c = 0; c <= 4; ++c) sys.cpu(c, 0, std::to_string(c), "0-4");
  sys.gpu("0000:1b:00.0", 0);
  sys.gpu("0000:3d:00.0", 0);
  CHECK(sets(NumaMode::kExclusive, sys, range(0, 4), 2) == Lists{"0-2", "3-4"});
}

TEST_CASE("exclusive with more GPUs on a node than physical cores is an error", "[numa]") {
  FakeSysfs sys;
  sys.possible_nodes("0");
  sys.numa_node(0, "0-1");
  sys.cpu(0, 0, "0-1", "0-1");  // one core, two threads
  sys.cpu(1, 0, "0-1", "0-1");
  sys.gpu("0000:1b:00.0", 0);
  sys.gpu("0000:3d:00.0", 0);
  NumaBinding b(NumaMode::kExclusive, sys.root(), {}, range(0, 1));
  REQUIRE_THROWS_WITH(b.cpus_for(0), Contains("1 physical core") && Contains("2 GPUs"));
}

TEST_CASE("core-complex starts over at the first group when a node has more GPUs than groups",
          "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  sys.gpu("0000:1c:00.0", 0);  // a third GPU on node 0, between the other two on the bus
  CHECK(sets(NumaMode::kCoreComplex, sys, range(0, 31), 3) ==
        Lists{"0-1,16-17", "2-3,18-19", "0-1,16-17"});
}

TEST_CASE("core-complex takes the highest-level data cache; without an L3 that is the L2",
          "[numa]") {
  FakeSysfs sys;
  sys.possible_nodes("0");
  sys.numa_node(0, "0-3");
  for (int c = 0; c <= 3; ++c) sys.cpu(c, 0, std::to_string(c), "");  // L1 and L2 per core
  sys.gpu("0000:1b:00.0", 0);
  sys.gpu("0000:3d:00.0", 0);
  CHECK(sets(NumaMode::kCoreComplex, sys, range(0, 3), 2) == Lists{"0", "1"});
}

TEST_CASE("a GPU whose PCI device has no NUMA node (-1) is on node 0", "[numa]") {
  FakeSysfs sys;
  sys.possible_nodes("0");
  sys.numa_node(0, "0-1");
  sys.gpu("0000:1b:00.0", -1);
  CHECK(sets(NumaMode::kNode, sys, range(0, 1), 1) == Lists{"0-1"});
}

TEST_CASE("socket passes over memory-only and absent NUMA nodes", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  sys.possible_nodes("0-5");
  sys.numa_node(4, "");  // memory only (CXL); node 5 is possible but not there
  CHECK(sets(NumaMode::kSocket, sys)[0] == "0-7,16-23");
}

TEST_CASE("local rank i is bound near CUDA device i as CUDA_VISIBLE_DEVICES numbers them",
          "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  NumaBinding b(NumaMode::kNode, sys.root(), {{"CUDA_VISIBLE_DEVICES", "3,0"}}, range(0, 31));
  CHECK(list(b.cpus_for(0)) == "12-15,28-31");
  CHECK(list(b.cpus_for(1)) == "0-3,16-19");
  REQUIRE_THROWS_WITH(b.cpus_for(2), Contains("local rank 2") && Contains("2 visible"));
}

TEST_CASE("binding without any GPU is an error, as torchrun's launch fails", "[numa]") {
  FakeSysfs sys;
  sys.possible_nodes("0");
  sys.numa_node(0, "0-1");
  for (NumaMode mode :
       {NumaMode::kNode, NumaMode::kSocket, NumaMode::kExclusive, NumaMode::kCoreComplex}) {
    NumaBinding b(mode, sys.root(), {}, range(0, 1));
    REQUIRE_THROWS_AS(b.cpus_for(0), elasticrun::Error);
    REQUIRE_THROWS_WITH(b.cpus_for(0), Contains("no NVIDIA GPU"));
  }
}

TEST_CASE("more local ranks than GPUs is an error for the first rank without one", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  NumaBinding b(NumaMode::kNode, sys.root(), {}, range(0, 31));
  CHECK_NOTHROW(b.cpus_for(3));
  REQUIRE_THROWS_WITH(b.cpus_for(4), Contains("local rank 4") && Contains("4 visible"));
}

TEST_CASE("a GPU whose NUMA node has no CPU the agent may use is an error", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  for (NumaMode mode :
       {NumaMode::kNode, NumaMode::kSocket, NumaMode::kExclusive, NumaMode::kCoreComplex}) {
    NumaBinding b(mode, sys.root(), {}, range(0, 3));
    CHECK_NOTHROW(b.cpus_for(0));
    REQUIRE_THROWS_WITH(b.cpus_for(2), Contains("0000:9a:00.0") && Contains("NUMA node 2") &&
                                           Contains("allowed: 0-3"));
  }
}

TEST_CASE("a missing or garbled sysfs file is an error naming the file", "[numa]") {
  FakeSysfs sys;
  two_sockets(sys);
  SECTION("the GPU's numa_node") {
    std::filesystem::remove(sys.root() / "sys/bus/pci/devices/0000:1b:00.0/numa_node");
    NumaBinding b(NumaMode::kNode, sys.root(), {}, range(0, 31));
    REQUIRE_THROWS_WITH(b.cpus_for(0), Contains("0000:1b:00.0/numa_node"));
  }
  SECTION("a node's cpulist") {
    sys.numa_node(0, "0-3,x");
    NumaBinding b(NumaMode::kNode, sys.root(), {}, range(0, 31));
    REQUIRE_THROWS_WITH(b.cpus_for(0), Contains("node0/cpulist"));
  }
  SECTION("a CPU's package") {
    sys.file("sys/devices/system/cpu/cpu0/topology/physical_package_id", "zero\n");
    NumaBinding b(NumaMode::kSocket, sys.root(), {}, range(0, 31));
    REQUIRE_THROWS_WITH(b.cpus_for(0), Contains("physical_package_id") && Contains("zero"));
  }
  SECTION("a CPU's caches") {
    std::filesystem::remove_all(sys.root() / "sys/devices/system/cpu/cpu0/cache");
    NumaBinding b(NumaMode::kCoreComplex, sys.root(), {}, range(0, 31));
    REQUIRE_THROWS_WITH(b.cpus_for(0), Contains("no data cache") && Contains("cpu0/cache"));
  }
}

TEST_CASE("numa_cpu_sets binds within the agent's own affinity", "[numa]") {
  cpu_set_t own;
  CPU_ZERO(&own);
  REQUIRE(::sched_getaffinity(0, sizeof(own), &own) == 0);
  const int first = [&] {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &own)) return c;
    }
    return -1;
  }();
  const int outside = elasticrun::util::kMaxCpu - 1;  // not on any machine we run on
  FakeSysfs sys;
  sys.possible_nodes("0-1");
  sys.numa_node(0, std::to_string(first) + "," + std::to_string(outside));
  sys.numa_node(1, std::to_string(outside));
  sys.gpu("0000:1b:00.0", 0);
  sys.gpu("0000:9a:00.0", 1);
  const auto sets = elasticrun::agent::numa_cpu_sets(NumaMode::kNode, 1, sys.root(), {});
  CHECK(sets == std::vector<std::vector<int>>{{first}});
  REQUIRE_THROWS_WITH(elasticrun::agent::numa_cpu_sets(NumaMode::kNode, 2, sys.root(), {}),
                      Contains("local rank 1") && Contains("NUMA node 1"));
}
