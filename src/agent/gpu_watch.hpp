// GPU health on this node (--gpu-health, docs/health.md): the driver's
// readings of the GPUs the workers see, judged by health::GpuMonitor.
//
// Threads. NVML calls cost (an ioctl each, per GPU) and, on a GPU in
// trouble, can block for seconds, so they never run on the attempt's loop:
// a thread of the watch's own reads every GPU every interval and queues
// the snapshot; the loop, on each health tick, takes what was queued
// (under a mutex held only to swap a queue) and judges it. The watch
// lives as long as the agent, across attempts, so NVML is opened once and
// XID events between attempts are not lost (they are notes: see
// gpu_monitor.hpp). An NVML call that never returns does not hold up the
// agent's exit: the watch waits a moment for its thread, then leaves it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "health/fault.hpp"
#include "health/gpu_monitor.hpp"

namespace elasticrun::agent {

// What reads the GPUs: NVML (agent/nvml), or a unit test's fake.
class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // One reading per GPU, in the order the GPUs were given. Runs on the
  // watch's thread only; may block.
  virtual std::vector<health::GpuReading> read() = 0;
};

// --gpu-health and where it looks.
struct GpuHealthConfig {
  bool enabled = true;  // auto: on where NVML and a GPU exist
  // The NVML library to load; ELASTICRUN_NVML_LIBRARY replaces it (the
  // integration suite's fake).
  std::string library = "libnvidia-ml.so.1";
  // Where the driver's /proc entries are read: "/", except in the
  // integration suite (ELASTICRUN_TEST_SYSFS_ROOT).
  std::string root = "/";
  std::chrono::milliseconds interval{std::chrono::seconds(5)};
};

class GpuWatch {
 public:
  // `first`: a reading taken already (start_gpu_watch takes it to say what
  // can be read); the thread reads every `interval` from now on.
  GpuWatch(std::unique_ptr<GpuSource> source, std::vector<health::GpuDevice> gpus,
           std::chrono::milliseconds interval, health::GpuSnapshot first);
  ~GpuWatch();
  GpuWatch(const GpuWatch&) = delete;
  GpuWatch& operator=(const GpuWatch&) = delete;

  const std::vector<health::GpuDevice>& gpus() const { return monitor_.gpus(); }

  // On the loop. An attempt's workers started at `start`.
  void begin_attempt(std::chrono::steady_clock::time_point start);
  // On the loop, every health tick: judges the snapshots read since the
  // last call, without waiting for one; logs the notes; returns the
  // attempt's fault, once.
  std::optional<health::Fault> poll();

 private:
  struct Shared;  // with the thread, which may outlive the watch
  static void run(const std::shared_ptr<Shared>& shared);

  std::shared_ptr<Shared> shared_;
  health::GpuMonitor monitor_;
  std::thread thread_;
};

// GPU health for the workers: their GPUs (cuda_devices under config.root,
// with CUDA_VISIBLE_DEVICES from `worker_env`), read through NVML. Logs one
// info line: which GPUs it watches and for what, or that GPU health is
// skipped and why (no GPU, no NVML, NVML knows none of them). Null when
// skipped or disabled.
std::unique_ptr<GpuWatch> start_gpu_watch(const GpuHealthConfig& config,
                                          const std::map<std::string, std::string>& worker_env);

}  // namespace elasticrun::agent
