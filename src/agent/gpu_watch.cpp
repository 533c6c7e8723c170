#include "agent/gpu_watch.hpp"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>

#include "agent/cuda_devices.hpp"
#include "agent/nvml.hpp"
#include "elasticrun/errors.hpp"
#include "rendezvous/heartbeat.hpp"
#include "util/logging.hpp"
#include "util/quiet_thread.hpp"

namespace elasticrun::agent {
namespace {

using Clock = std::chrono::steady_clock;

// Snapshots wait here only while no attempt polls (between attempts, a
// spare waiting to join): past this many, the oldest two are merged.
constexpr size_t kMaxPending = 64;
// XIDs a merged reading keeps per GPU: a storm of one XID says no more
// than its first few.
constexpr size_t kMaxMergedXids = 64;
// How long the destructor waits for a reading under way.
constexpr auto kJoinWait = std::chrono::seconds(2);

// `newer` taken after `older`: the states are the newer's where it has
// them, the XIDs both's.
health::GpuSnapshot merge(health::GpuSnapshot older, const health::GpuSnapshot& newer) {
  for (size_t i = 0; i < older.readings.size() && i < newer.readings.size(); ++i) {
    health::GpuReading& o = older.readings[i];
    const health::GpuReading& n = newer.readings[i];
    if (n.ecc_uncorrected) o.ecc_uncorrected = n.ecc_uncorrected;
    if (n.retired_pages_pending) o.retired_pages_pending = n.retired_pages_pending;
    if (n.remap_pending) o.remap_pending = n.remap_pending;
    if (n.remap_failed) o.remap_failed = n.remap_failed;
    o.lost = n.lost;
    for (uint64_t xid : n.xids) {
      if (o.xids.size() < kMaxMergedXids) o.xids.push_back(xid);
    }
  }
  older.taken = newer.taken;
  return older;
}

std::string seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

std::string gpu_name(const health::GpuDevice& d) {
  return "GPU " + d.pci_address + " (CUDA " + std::to_string(d.cuda_index) + ")";
}

}  // namespace

struct GpuWatch::Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool done = false;  // the thread has returned from its last reading
  std::unique_ptr<GpuSource> source;
  std::chrono::milliseconds interval{};
  std::deque<health::GpuSnapshot> pending;

  void push(health::GpuSnapshot s) {
    pending.push_back(std::move(s));
    if (pending.size() > kMaxPending) {
      health::GpuSnapshot oldest = std::move(pending.front());
      pending.pop_front();
      pending.front() = merge(std::move(oldest), pending.front());
    }
  }
};

GpuWatch::GpuWatch(std::unique_ptr<GpuSource> source, std::vector<health::GpuDevice> gpus,
                   std::chrono::milliseconds interval, health::GpuSnapshot first)
    : shared_(std::make_shared<Shared>()), monitor_(std::move(gpus)) {
  shared_->source = std::move(source);
  shared_->interval = interval;
  shared_->pending.push_back(std::move(first));
  thread_ = util::start_quiet_thread([shared = shared_] { run(shared); });
}

GpuWatch::~GpuWatch() {
  std::unique_lock lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  if (shared_->cv.wait_for(lock, kJoinWait, [this] { return shared_->done; })) {
    lock.unlock();
    thread_.join();
    return;
  }
  // It is inside NVML: it holds its own reference to what it uses and
  // returns when NVML does (or dies with the process).
  util::logger("health")->warn("GPU health: an NVML call has not returned for {}; not waiting",
                               seconds(kJoinWait));
  thread_.detach();
}

void GpuWatch::run(const std::shared_ptr<Shared>& shared) {
  std::unique_lock lock(shared->mu);
  while (!shared->cv.wait_for(lock, shared->interval, [&] { return shared->stop; })) {
    lock.unlock();
    // Stamped before the read: what it finds happened by the time it returns.
    health::GpuSnapshot s;
    s.taken = Clock::now();
    s.readings = shared->source->read();
    lock.lock();
    shared->push(std::move(s));
  }
  shared->done = true;
  shared->cv.notify_all();
}

void GpuWatch::begin_attempt(Clock::time_point start) {
  monitor_.begin_attempt(start);
}

std::optional<health::Fault> GpuWatch::poll() {
  std::deque<health::GpuSnapshot> snapshots;
  {
    std::lock_guard lock(shared_->mu);
    snapshots.swap(shared_->pending);
  }
  std::optional<health::Fault> fault;
  for (const auto& s : snapshots) {
    auto verdict = monitor_.observe(s);
    for (const auto& note : verdict.notes) util::logger("health")->warn("GPU health: {}", note);
    if (verdict.fault && !fault) fault = std::move(verdict.fault);
  }
  return fault;
}

std::unique_ptr<GpuWatch> start_gpu_watch(const GpuHealthConfig& config,
                                          const std::map<std::string, std::string>& worker_env) {
  if (!config.enabled) return nullptr;
  auto log = util::logger("health");
  const auto skip = [&log](const std::string& why) {
    log->info("GPU health is skipped: {}", why);
    return nullptr;
  };
  // The GPUs first, from /proc: a machine without them never loads NVML.
  const std::filesystem::path driver_dir =
      std::filesystem::path(config.root) / "proc/driver/nvidia/gpus";
  CudaDevices devices;
  try {
    devices = cuda_devices(config.root, worker_env);
  } catch (const Error&) {
    return skip(
        "CUDA_VISIBLE_DEVICES names MIG instances, whose GPUs are not found without NVML's MIG "
        "queries");
  }
  if (devices.devices.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(driver_dir, ec)) {
      return skip("no NVIDIA GPU here (no " + driver_dir.string() + ")");
    }
    return skip("the workers see no NVIDIA GPU (CUDA_VISIBLE_DEVICES)");
  }
  std::string why;
  auto nvml = Nvml::open(config.library, &why);
  if (!nvml) return skip(why);
  std::vector<std::string> addresses;
  for (const auto& d : devices.devices) addresses.push_back(d.pci_address);
  const std::vector<std::string> problems = nvml->attach(addresses);
  std::vector<health::GpuDevice> watched;
  std::string left_out;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const health::GpuDevice d{addresses[i], static_cast<int>(i)};
    if (problems[i].empty()) {
      watched.push_back(d);
    } else {
      left_out += (left_out.empty() ? "" : "; ") + gpu_name(d) + ": " + problems[i];
    }
  }
  if (watched.empty()) return skip("NVML reads none of the workers' GPUs: " + left_out);
  health::GpuSnapshot first;
  first.taken = Clock::now();
  first.readings = nvml->read();
  const std::string readable = nvml->readable();
  if (readable.empty()) {
    return skip("NVML gives none of the readings GPU health needs on the workers' GPUs");
  }
  std::string names;
  for (const auto& d : watched) names += (names.empty() ? "" : ", ") + gpu_name(d);
  log->info("GPU health: watching {} through NVML every {}: {}{}", names, seconds(config.interval),
            readable, left_out.empty() ? "" : "; not watched: " + left_out);
  return std::make_unique<GpuWatch>(std::move(nvml), std::move(watched), config.interval,
                                    std::move(first));
}

}  // namespace elasticrun::agent
