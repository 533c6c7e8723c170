// The CPU allocator bench/planner_validate.py measures peaks with: PyTorch's
// default CPU allocator (c10::alloc_cpu, the profiler's memory reports),
// plus a count of the bytes of live tensors, allocated and freed on any
// thread, and its maximum: the CPU twin of torch.cuda.max_memory_allocated().
//
// torch.profiler's memory events are not that: the profiler records a free
// only on a thread it profiles, and gloo frees the tensors a collective's
// Work holds (an all-gather's output, the copy a reduce-scatter makes of
// its input) on its own worker thread whenever that thread drops the last
// reference. Those frees never reach the profiler, so a running sum of its
// events counts them as live until the end and overstates FSDP2's peak.
//
// Built by the bench with torch.utils.cpp_extension and loaded into each
// rank before the model exists; tensors allocated before
// elasticrun_cpu_install() keep the default allocator's deleter and are
// not counted.
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace {

std::mutex mu;
std::unordered_map<void*, size_t> sizes;  // live allocations (guarded by mu)
int64_t live = 0;                         // guarded by mu
int64_t peak = 0;                         // guarded by mu

void count_and_free(void* ptr) {
  if (ptr == nullptr) return;
  c10::profiledCPUMemoryReporter().Delete(ptr);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = sizes.find(ptr);
    if (it != sizes.end()) {
      live -= static_cast<int64_t>(it->second);
      sizes.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

struct PeakCountingAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    try {
      ptr = c10::alloc_cpu(nbytes);
    } catch (const c10::Error&) {
      c10::profiledCPUMemoryReporter().OutOfMemory(nbytes);
      throw;
    }
    c10::profiledCPUMemoryReporter().New(ptr, nbytes);
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(mu);
      sizes[ptr] = nbytes;
      live += static_cast<int64_t>(nbytes);
      peak = std::max(peak, live);
    }
    return {ptr, ptr, &count_and_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &count_and_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PeakCountingAllocator allocator;

}  // namespace

// 1 when the CPU allocator is now this one, 0 when one of higher priority
// is registered (the counts would then miss every allocation).
extern "C" int elasticrun_cpu_install() {
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
  return c10::GetCPUAllocator() == &allocator ? 1 : 0;
}

// Bytes of tensors allocated since the install and not yet freed.
extern "C" int64_t elasticrun_cpu_live_bytes() {
  std::lock_guard<std::mutex> lock(mu);
  return live;
}

// Starts a new window: the peak becomes the bytes live now.
extern "C" void elasticrun_cpu_reset_peak() {
  std::lock_guard<std::mutex> lock(mu);
  peak = live;
}

// The most bytes live at once since the last reset.
extern "C" int64_t elasticrun_cpu_peak_bytes() {
  std::lock_guard<std::mutex> lock(mu);
  return peak;
}
