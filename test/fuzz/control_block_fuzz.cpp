// libFuzzer target for control::ControlBlock::open (src/control/): the bytes
// are a control block file, as a worker would find it at
// ELASTICRUN_CONTROL_FILE. open() must refuse, with EINVAL and a message
// naming the path, whatever is not a version-1 block; it must never crash or
// map past the file. A block it accepts is read through every accessor, then
// written back (the event by the agent's writer, each slot by its worker's)
// and read again: the fields must survive the round trip, except the reason,
// which a writer cuts to 127 bytes at a UTF-8 boundary.
//
// The input lives in one memfd, reopened through /proc/self/fd as a path, so
// the target does no disk I/O. Seqlocks in the input may be odd (a writer
// that died mid-update); the reader's patience is set to zero so that such an
// input costs microseconds, not the default 100 ms.

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "control/control_block.hpp"

namespace {

using elasticrun::control::ControlBlock;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "control_block_fuzz: %s\n", what);
  std::abort();
}

int input_fd() {
  static const int fd = [] {
    int f = ::memfd_create("control_block_fuzz", MFD_CLOEXEC);
    if (f < 0) fail("memfd_create failed");
    return f;
  }();
  return fd;
}

bool same_bits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = input_fd();
  if (::ftruncate(fd, 0) != 0) fail("ftruncate failed");
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) fail("pwrite failed");
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  auto opened = ControlBlock::open(path);
  if (!opened) {
    if (opened.status().err() != EINVAL) fail("a bad file gave an errno other than EINVAL");
    if (opened.status().message().find(path) == std::string::npos) fail("error lacks the path");
    return 0;
  }
  ControlBlock cb = std::move(opened).value();
  cb.set_stuck_writer_timeout(std::chrono::nanoseconds(0));
  const int n = cb.num_slots();
  if (n < 1 || n > elasticrun::control::kMaxSlots) fail("opened with a slot count out of range");
  if (size < 256 + static_cast<size_t>(n) * 64) fail("opened a file too short for its slots");

  const auto event = cb.read_event();
  if (event.reason.size() > 128) fail("reason longer than its field");
  (void)elasticrun::control::to_string(event.kind);
  int64_t max_step = -1;
  bool any = false;
  for (int i = 0; i < n; ++i) {
    const auto s = cb.read_slot(i);
    if (s.step > max_step) max_step = s.step;
    if (cb.attached(i) != ((s.flags & elasticrun::control::kFlagAttached) != 0)) {
      fail("attached() disagrees with the slot's flags");
    }
    any = any || cb.attached(i);
  }
  if (cb.max_step() != max_step) fail("max_step() disagrees with the slots");
  if (cb.any_attached() != any) fail("any_attached() disagrees with the slots");

  // Write everything back and read it again.
  const uint64_t event_seq = cb.publish_event(event);
  if (event_seq != event.event_seq + 1) fail("publish_event did not count up");
  const auto again = cb.read_event();
  if (again.generation != event.generation || again.event_seq != event_seq ||
      again.stop_step != event.stop_step || again.kind != event.kind ||
      again.next_world_size != event.next_world_size ||
      again.deadline_unix_ms != event.deadline_unix_ms) {
    fail("event fields changed in a round trip");
  }
  if (again.reason.size() > 127 ||
      event.reason.compare(0, again.reason.size(), again.reason) != 0) {
    fail("the stored reason is not a prefix of the one published");
  }
  for (int i = 0; i < n; ++i) {
    const auto s = cb.read_slot(i);
    cb.write_slot(i, s);
    const auto t = cb.read_slot(i);
    if (t.step != s.step || t.timestamp_ns != s.timestamp_ns || !same_bits(t.loss, s.loss) ||
        !same_bits(t.tokens_per_s, s.tokens_per_s) || t.flags != s.flags || t.pid != s.pid) {
      fail("slot fields changed in a round trip");
    }
  }
  return 0;
}
