#include "agent/cuda_devices.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>

#include "elasticrun/errors.hpp"
#include "util/strings.hpp"

namespace elasticrun::agent {
namespace {

namespace fs = std::filesystem;

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// "DDDD:BB:DD.F" (hex; the domain may be longer, as VMD's "10000:...") as
// numbers, so that sorting compares numbers, not text.
std::optional<std::array<unsigned, 4>> pci_key(const std::string& address) {
  std::array<unsigned, 4> k{};
  int end = 0;
  if (std::sscanf(address.c_str(), "%x:%x:%x.%x%n", &k[0], &k[1], &k[2], &k[3], &end) != 4 ||
      static_cast<size_t>(end) != address.size()) {
    return std::nullopt;
  }
  return k;
}

// The driver's "information" file: "Key:\t value" lines.
std::map<std::string, std::string> read_information(const fs::path& file) {
  std::map<std::string, std::string> fields;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    fields[std::string(trim(std::string_view(line).substr(0, colon)))] =
        std::string(trim(std::string_view(line).substr(colon + 1)));
  }
  return fields;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// CUDA_VISIBLE_DEVICES applied to all (in PCI order).
std::vector<CudaDevice> select_visible(const std::vector<CudaDevice>& all,
                                       std::string_view visible) {
  std::vector<CudaDevice> out;
  std::set<size_t> taken;
  std::string_view rest = visible;
  while (!trim(rest).empty()) {
    const size_t comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (entry.rfind("MIG-", 0) == 0) {
      throw Error("CUDA_VISIBLE_DEVICES names a MIG instance (" + util::quote(entry) +
                  "): --numa-binding cannot tell which GPU it is on without NVML; list "
                  "GPUs by index or UUID");
    }
    std::optional<size_t> index;
    if (all_digits(entry)) {
      if (entry.size() < 6 && std::stoul(std::string(entry)) < all.size()) {
        index = std::stoul(std::string(entry));
      }
    } else if (entry.rfind("GPU-", 0) == 0) {
      for (size_t i = 0; i < all.size(); ++i) {
        if (all[i].uuid.rfind(entry, 0) != 0) continue;
        if (index) {  // a prefix of two UUIDs names neither
          index.reset();
          break;
        }
        index = i;
      }
    }
    // CUDA stops at the first entry that names no GPU, or one named before.
    if (!index || !taken.insert(*index).second) break;
    out.push_back(all[*index]);
  }
  return out;
}

}  // namespace

CudaDevices cuda_devices(const fs::path& root, const std::map<std::string, std::string>& env) {
  std::vector<std::pair<std::array<unsigned, 4>, CudaDevice>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "proc/driver/nvidia/gpus", ec)) {
    const std::string name = entry.path().filename().string();
    const auto key = pci_key(name);
    if (!key) continue;
    auto info = read_information(entry.path() / "information");
    if (info["GPU Excluded"] == "Yes") continue;
    found.push_back({*key, CudaDevice{name, info["GPU UUID"], info["Model"]}});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<CudaDevice> all;
  for (auto& f : found) all.push_back(std::move(f.second));

  CudaDevices result;
  const auto visible = env.find("CUDA_VISIBLE_DEVICES");
  result.devices = visible == env.end() ? all : select_visible(all, visible->second);

  const auto order = env.find("CUDA_DEVICE_ORDER");
  if (order == env.end() || order->second != "PCI_BUS_ID") {
    std::set<std::string> models;
    for (const auto& d : result.devices) models.insert(d.model);
    if (models.size() > 1) {
      result.warning =
          "the GPUs are of " + std::to_string(models.size()) +
          " models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers the fastest first, "
          "while --numa-binding takes local rank i to be the i-th GPU in PCI bus order; set "
          "CUDA_DEVICE_ORDER=PCI_BUS_ID to make them agree";
    }
  }
  return result;
}

int cuda_device_count(const fs::path& root, const std::map<std::string, std::string>& env) {
  std::error_code ec;
  int gpus = 0;  // what the machine has, before CUDA_VISIBLE_DEVICES
  if (fs::is_directory(root / "proc/driver/nvidia/gpus", ec)) {
    try {
      return static_cast<int>(cuda_devices(root, env).devices.size());
    } catch (const Error&) {
      // A MIG instance: counted by its entry below.
      gpus = static_cast<int>(cuda_devices(root, {}).devices.size());
    }
  } else {
    for (const auto& entry : fs::directory_iterator(root / "dev", ec)) {
      const std::string name = entry.path().filename().string();
      const std::string number = name.substr(std::min(name.size(), std::string("nvidia").size()));
      if (name.rfind("nvidia", 0) == 0 && !number.empty() &&
          std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        ++gpus;
      }
    }
  }
  const auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible == env.end()) return gpus;
  if (visible->second.empty()) return 0;
  // Entries that cannot be checked against the GPUs: no more than there are.
  const int entries =
      1 + static_cast<int>(std::count(visible->second.begin(), visible->second.end(), ','));
  return std::min(entries, gpus);
}

}  // namespace elasticrun::agent
