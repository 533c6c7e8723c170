#include "agent/numa_binding.hpp"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>

#include "elasticrun/errors.hpp"
#include "util/cpu_list.hpp"
#include "util/logging.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;

CpuSet intersect(const CpuSet& a, const CpuSet& b) {
  CpuSet out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

CpuSet unite(const CpuSet& a, const CpuSet& b) {
  CpuSet out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// This thread's affinity, however many CPUs the kernel was built for.
CpuSet own_affinity() {
  for (int n = 1024; n <= util::kMaxCpu; n *= 2) {
    cpu_set_t* set = CPU_ALLOC(static_cast<size_t>(n));
    const size_t size = CPU_ALLOC_SIZE(static_cast<size_t>(n));
    if (::sched_getaffinity(0, size, set) != 0) {
      const int err = errno;
      CPU_FREE(set);
      if (err == EINVAL) continue;  // a mask shorter than the kernel's
      throw Error(std::string("--numa-binding: sched_getaffinity: ") + std::strerror(err));
    }
    CpuSet cpus;
    for (int c = 0; c < n; ++c) {
      if (CPU_ISSET_S(static_cast<size_t>(c), size, set)) cpus.push_back(c);
    }
    CPU_FREE(set);
    return cpus;
  }
  throw Error("--numa-binding: sched_getaffinity: more CPUs than elasticrun handles");
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

std::optional<NumaMode> numa_mode_from_string(std::string_view name) {
  if (name == "node") return NumaMode::kNode;
  if (name == "socket") return NumaMode::kSocket;
  if (name == "exclusive") return NumaMode::kExclusive;
  if (name == "core-complex") return NumaMode::kCoreComplex;
  return std::nullopt;
}

const char* numa_mode_name(NumaMode mode) {
  switch (mode) {
    case NumaMode::kNode:
      return "node";
    case NumaMode::kSocket:
      return "socket";
    case NumaMode::kExclusive:
      return "exclusive";
    case NumaMode::kCoreComplex:
      return "core-complex";
  }
  return "?";
}

NumaBinding::NumaBinding(NumaMode mode, fs::path root,
                         const std::map<std::string, std::string>& env, CpuSet allowed)
    : mode_(mode),
      root_(std::move(root)),
      gpus_(cuda_devices(root_, env)),
      allowed_(std::move(allowed)) {}

std::string NumaBinding::read_file(const fs::path& relative) const {
  const fs::path path = root_ / relative;
  std::ifstream in(path);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in) {
    throw Error(std::string("--numa-binding=") + numa_mode_name(mode_) + ": cannot read " +
                path.string() + ": " + std::strerror(errno));
  }
  return text.str();
}

int NumaBinding::read_int(const fs::path& relative) const {
  const std::string text = trimmed(read_file(relative));
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Error(std::string("--numa-binding=") + numa_mode_name(mode_) + ": " +
                (root_ / relative).string() + " holds \"" + text + "\", not a number");
  }
  return v;
}

CpuSet NumaBinding::read_cpus(const fs::path& relative) const {
  auto cpus = util::parse_cpu_list(read_file(relative));
  if (!cpus.is_ok()) {
    throw Error(std::string("--numa-binding=") + numa_mode_name(mode_) + ": " +
                (root_ / relative).string() + ": " + cpus.status().message());
  }
  return std::move(cpus).value();
}

int NumaBinding::numa_node_of(int device) const {
  const std::string& address = gpus_.devices.at(static_cast<size_t>(device)).pci_address;
  // -1: the firmware gives no node, which on a machine of one node is node 0.
  return std::max(read_int(fs::path("sys/bus/pci/devices") / address / "numa_node"), 0);
}

CpuSet NumaBinding::node_cpus(int node) const {
  return intersect(
      read_cpus(fs::path("sys/devices/system/node") / ("node" + std::to_string(node)) / "cpulist"),
      allowed_);
}

int NumaBinding::socket_of_node(int node) const {
  const CpuSet cpus = node_cpus(node);
  if (cpus.empty()) return -1;
  return read_int(fs::path("sys/devices/system/cpu") / ("cpu" + std::to_string(cpus.front())) /
                  "topology/physical_package_id");
}

CpuSet NumaBinding::socket_cpus(int node) const {
  const int socket = socket_of_node(node);
  if (socket < 0) return {};
  CpuSet cpus;
  for (int n : read_cpus("sys/devices/system/node/possible")) {
    // torchrun fails on a possible node that is not there, or has no CPU
    // it may use (memory-only nodes: CXL, HBM); neither is in any socket's
    // set of CPUs, so we pass over them.
    std::error_code ec;
    if (!fs::is_directory(root_ / "sys/devices/system/node" / ("node" + std::to_string(n)), ec)) {
      continue;
    }
    if (socket_of_node(n) == socket) cpus = unite(cpus, node_cpus(n));
  }
  return cpus;
}

std::vector<int> NumaBinding::devices_on_node(int node) const {
  std::vector<int> devices;
  for (size_t d = 0; d < gpus_.devices.size(); ++d) {
    if (numa_node_of(static_cast<int>(d)) == node) devices.push_back(static_cast<int>(d));
  }
  return devices;
}

CpuSet NumaBinding::exclusive_cpus(int device, int node) const {
  const std::vector<int> devices = devices_on_node(node);
  const auto position =
      static_cast<size_t>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  // Physical cores in order of their lowest hardware thread (allowed or
  // not), each with its allowed threads.
  const CpuSet allowed = node_cpus(node);
  if (allowed.empty()) return {};
  std::map<int, CpuSet> cores;
  for (int cpu : allowed) {
    const CpuSet siblings =
        read_cpus(fs::path("sys/devices/system/cpu") / ("cpu" + std::to_string(cpu)) /
                  "topology/thread_siblings_list");
    cores[siblings.empty() ? cpu : std::min(cpu, siblings.front())].push_back(cpu);
  }
  const size_t per_device = cores.size() / devices.size();
  const size_t extra = cores.size() % devices.size();
  if (per_device < 1) {
    throw Error("--numa-binding=exclusive: NUMA node " + std::to_string(node) + " has " +
                std::to_string(cores.size()) + " physical core(s) the agent may use for " +
                std::to_string(devices.size()) + " GPUs");
  }
  const size_t begin = position * per_device + std::min(position, extra);
  const size_t end = begin + per_device + (position < extra ? 1 : 0);
  CpuSet cpus;
  auto core = std::next(cores.begin(), static_cast<long>(begin));
  for (size_t i = begin; i < end; ++i, ++core) cpus = unite(cpus, core->second);
  return cpus;
}

CpuSet NumaBinding::max_level_cache_cpus(int cpu) const {
  const fs::path cache =
      fs::path("sys/devices/system/cpu") / ("cpu" + std::to_string(cpu)) / "cache";
  // index0, index1, ... in numeric order: of two caches at the same level
  // the first is taken (data and unified caches do not share a level in
  // practice).
  std::map<int, std::string> indices;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_ / cache, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 5 || name.compare(0, 5, "index") != 0) continue;
    int n = 0;
    const auto [end, err] = std::from_chars(name.data() + 5, name.data() + name.size(), n);
    if (err == std::errc() && end == name.data() + name.size()) indices[n] = name;
  }
  int best_level = -1;
  CpuSet best;
  for (const auto& [n, name] : indices) {
    const std::string type = trimmed(read_file(cache / name / "type"));
    if (type != "Unified" && type != "Data") continue;  // instruction caches
    const int level = read_int(cache / name / "level");
    if (level <= best_level) continue;
    best_level = level;
    best = read_cpus(cache / name / "shared_cpu_list");
  }
  if (best.empty()) {
    throw Error("--numa-binding=core-complex: no data cache listed under " +
                (root_ / cache).string());
  }
  return best;
}

CpuSet NumaBinding::core_complex_cpus(int device, int node) const {
  const std::vector<int> devices = devices_on_node(node);
  const auto position =
      static_cast<size_t>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  // Cache groups by their lowest CPU (allowed or not), with their allowed CPUs.
  std::map<int, CpuSet> groups;
  for (int cpu : node_cpus(node)) groups[max_level_cache_cpus(cpu).front()].push_back(cpu);
  if (groups.empty()) return {};
  std::vector<std::pair<int, CpuSet>> ordered(groups.begin(), groups.end());
  // Fullest groups first, then by lowest CPU.
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return ordered[position % ordered.size()].second;
}

CpuSet NumaBinding::cpus_for(int local_rank) const {
  const std::string what = std::string("--numa-binding=") + numa_mode_name(mode_);
  const auto& devices = gpus_.devices;
  if (devices.empty()) {
    throw Error(what + ": no NVIDIA GPU found (" + (root_ / "proc/driver/nvidia/gpus").string() +
                " lists none, or CUDA_VISIBLE_DEVICES hides them all); torchrun fails here too: "
                "leave --numa-binding out on nodes without GPUs");
  }
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= devices.size()) {
    throw Error(what + ": local rank " + std::to_string(local_rank) +
                " has no GPU of its own: " + std::to_string(devices.size()) + " visible");
  }
  const int node = numa_node_of(local_rank);
  CpuSet cpus;
  switch (mode_) {
    case NumaMode::kNode:
      cpus = node_cpus(node);
      break;
    case NumaMode::kSocket:
      cpus = socket_cpus(node);
      break;
    case NumaMode::kExclusive:
      cpus = exclusive_cpus(local_rank, node);
      break;
    case NumaMode::kCoreComplex:
      cpus = core_complex_cpus(local_rank, node);
      break;
  }
  if (cpus.empty()) {
    throw Error(what + ": local rank " + std::to_string(local_rank) + " (GPU " +
                devices[static_cast<size_t>(local_rank)].pci_address + ", NUMA node " +
                std::to_string(node) + "): the node has no CPU the agent may run on (allowed: " +
                util::format_cpu_list(allowed_) + ")");
  }
  return cpus;
}

std::vector<CpuSet> numa_cpu_sets(NumaMode mode, int nproc, const fs::path& root,
                                  const std::map<std::string, std::string>& env) {
  auto log = util::logger("agent");
  NumaBinding binding(mode, root, env, own_affinity());
  if (!binding.gpus().warning.empty()) log->warn("--numa-binding: {}", binding.gpus().warning);
  std::vector<CpuSet> sets;
  for (int lr = 0; lr < nproc; ++lr) {
    sets.push_back(binding.cpus_for(lr));
    log->info("--numa-binding={}: local rank {} (GPU {}, NUMA node {}) runs on CPUs {}",
              numa_mode_name(mode), lr, binding.gpus().devices[static_cast<size_t>(lr)].pci_address,
              binding.numa_node_of(lr), util::format_cpu_list(sets.back()));
  }
  return sets;
}

}  // namespace elasticrun::agent
