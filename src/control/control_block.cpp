// The control block's mapping and its seqlocks (docs/protocol.md, "The
// control block").
//
// Every access to the shared bytes, agent and worker fields alike, goes
// through std::atomic_ref: the other side is another process (or, in tests,
// another thread) writing the same bytes concurrently, and a plain access
// would be a data race. The seqlock follows Boehm ("Can seqlocks get along
// with programming language memory models?", 2012) without standalone fences,
// which ThreadSanitizer does not model: the writer stores the odd sequence
// number, then every data field with release (so nobody sees a new field
// without the odd number before it), then the even number with release; the
// reader loads the number with acquire, every field with acquire (so the
// second load of the number cannot move before them), and the number again.
// On x86-64 each of these is a plain mov.
#include "control/control_block.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "control/assignment.hpp"

static_assert(std::endian::native == std::endian::little,
              "the control block is little-endian and mapped as is");

namespace elasticrun::control {

namespace {

// The header as it lies in the file. reason is a char[128] on disk; it is
// declared as words so that it can be copied with 8-byte atomic accesses.
struct Header {
  uint32_t magic;
  uint32_t version;
  uint32_t header_size;
  uint32_t slot_size;
  uint32_t num_slots;
  uint32_t agent_flags;
  uint64_t seq;
  uint64_t generation;
  uint64_t event_seq;
  int64_t stop_step;
  uint32_t event_kind;
  int32_t next_world_size;
  uint64_t deadline_unix_ms;
  uint64_t reason[kReasonSize / 8];
  uint8_t pad[56];
};

// loss and tokens_per_s are IEEE-754 doubles on disk, kept here as their bits.
struct Slot {
  uint64_t seq;
  int64_t step;
  uint64_t timestamp_ns;
  uint64_t loss;
  uint64_t tokens_per_s;
  uint32_t flags;
  uint32_t pid;
  uint32_t compute_us;
  uint32_t section_limit_s;
  uint64_t section_name;  // char[8] on disk, as a word for one atomic copy
};

static_assert(std::atomic_ref<uint64_t>::is_always_lock_free &&
                  std::atomic_ref<uint32_t>::is_always_lock_free,
              "another process shares these words: they must be lock-free");

template <typename T>
T load(const T& field, std::memory_order order) {
  // atomic_ref<const T> arrives only in C++26; the mapping is writable.
  return std::atomic_ref<T>(const_cast<T&>(field)).load(order);
}

template <typename T>
void store(T& field, T value, std::memory_order order = std::memory_order_release) {
  std::atomic_ref<T>(field).store(value, order);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Starts an update: makes seq odd and returns that odd value. A seq found
// odd was left by a writer that died mid-update; this update takes it over.
uint64_t begin_write(uint64_t& seq) {
  const uint64_t odd = load(seq, std::memory_order_relaxed) | 1;
  store(seq, odd, std::memory_order_relaxed);
  return odd;
}

void end_write(uint64_t& seq, uint64_t odd) {
  store(seq, odd + 1, std::memory_order_release);
}

// Runs copy (which must load with acquire) until it ran between two equal,
// even loads of seq, or until seq stayed odd at one value for stuck_timeout.
template <typename Copy>
void read_consistent(const uint64_t& seq, std::chrono::nanoseconds stuck_timeout, Copy&& copy) {
  uint64_t odd_seen = 0;  // 0 is even: no odd value seen yet
  std::chrono::steady_clock::time_point odd_since;
  for (unsigned attempt = 0;; ++attempt) {
    const uint64_t before = load(seq, std::memory_order_acquire);
    if ((before & 1) == 0) {
      copy();
      if (load(seq, std::memory_order_relaxed) == before) return;
    } else if (before != odd_seen) {
      odd_seen = before;
      odd_since = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - odd_since >= stuck_timeout) {
      copy();
      return;
    }
    // An update is a few stores; spin briefly, then let the writer run (it
    // may share our core, or be a Python worker waiting for its GIL).
    if (attempt < 64) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
}

// The longest prefix of s that fits max bytes without splitting a UTF-8
// sequence (a cut never lands before a continuation byte).
size_t utf8_prefix(const std::string& s, size_t max) {
  if (s.size() <= max) return s.size();
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

void store_words(uint64_t* dst, const uint64_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) store(dst[i], src[i]);
}

void load_words(uint64_t* dst, const uint64_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = load(src[i], std::memory_order_acquire);
}

// EINVAL: the file is not a control block this build can read.
__attribute__((format(printf, 2, 3))) util::Status format_error(const std::string& path,
                                                                const char* fmt, ...) {
  char buf[200];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return util::Status(EINVAL, "control block " + path + ": " + buf);
}

size_t file_size_for(int num_slots) {
  return kHeaderSize + static_cast<size_t>(kSlotSize) * static_cast<size_t>(num_slots);
}

}  // namespace

static_assert(sizeof(Header) == kHeaderSize);
static_assert(offsetof(Header, seq) == 24);
static_assert(offsetof(Header, generation) == 32);
static_assert(offsetof(Header, event_seq) == 40);
static_assert(offsetof(Header, stop_step) == 48);
static_assert(offsetof(Header, event_kind) == 56);
static_assert(offsetof(Header, next_world_size) == 60);
static_assert(offsetof(Header, deadline_unix_ms) == 64);
static_assert(offsetof(Header, reason) == 72);
static_assert(sizeof(Slot) == kSlotSize);
static_assert(offsetof(Slot, step) == 8);
static_assert(offsetof(Slot, timestamp_ns) == 16);
static_assert(offsetof(Slot, loss) == 24);
static_assert(offsetof(Slot, tokens_per_s) == 32);
static_assert(offsetof(Slot, flags) == 40);
static_assert(offsetof(Slot, pid) == 44);
static_assert(offsetof(Slot, compute_us) == 48);
static_assert(offsetof(Slot, section_limit_s) == 52);
static_assert(offsetof(Slot, section_name) == 56);

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::none:
      return "none";
    case EventKind::scale_up:
      return "scale_up";
    case EventKind::scale_down:
      return "scale_down";
    case EventKind::replace:
      return "replace";
    case EventKind::shutdown:
      return "shutdown";
    case EventKind::restart:
      return "restart";
    case EventKind::reform:
      return "reform";
  }
  return "unknown";
}

util::Result<ControlBlock> ControlBlock::create(const std::string& path, int num_slots) {
  if (num_slots < 1 || num_slots > kMaxSlots) {
    return format_error(path, "%d slots asked for, outside 1..%d", num_slots, kMaxSlots);
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return util::Status(
        err, err == EEXIST ? "create control block " + path +
                                 " (a leftover of an earlier run? the agent needs a fresh path)"
                           : "create control block " + path);
  }
  const size_t size = file_size_for(num_slots);
  // posix_fallocate after ftruncate: a full tmpfs fails here, with an error,
  // instead of raising SIGBUS in a worker that touches an unbacked page.
  int err = 0;
  const char* what = nullptr;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    err = errno;
    what = "size";
  } else if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0) {
    err = rc;
    what = "allocate";
  }
  void* base = MAP_FAILED;
  if (err == 0) {
    base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      err = errno;
      what = "map";
    }
  }
  ::close(fd);  // the mapping keeps the file
  if (err != 0) {
    ::unlink(path.c_str());  // ours (O_EXCL); nobody could use it half-made
    return util::Status(err, std::string(what) + " control block " + path);
  }

  ControlBlock block(path, base, size, num_slots);
  Header* h = static_cast<Header*>(block.base_);
  store(h->version, kVersion, std::memory_order_relaxed);
  store(h->header_size, kHeaderSize, std::memory_order_relaxed);
  store(h->slot_size, kSlotSize, std::memory_order_relaxed);
  store(h->num_slots, static_cast<uint32_t>(num_slots), std::memory_order_relaxed);
  block.reset(0);
  // Last, with release: whoever sees the magic sees a complete block.
  store(h->magic, kMagic);
  return block;
}

util::Result<ControlBlock> ControlBlock::open(const std::string& path) {
  // O_NONBLOCK: a FIFO at the path must not hang the worker; it is refused
  // below as not a regular file.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return util::Status(errno, "open control block " + path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) return util::Status(errno, "stat control block " + path);
  if (!S_ISREG(st.st_mode)) return format_error(path, "not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kHeaderSize) {
    return format_error(path, "%" PRIu64 " bytes, shorter than the %" PRIu32 "-byte header",
                        file_size, kHeaderSize);
  }
  // Validate a private copy: only the fields that never change after create.
  Header h;
  ssize_t got = ::pread(fd, &h, sizeof(h), 0);
  if (got < 0) return util::Status(errno, "read control block " + path);
  if (static_cast<size_t>(got) != sizeof(h)) {
    return format_error(path, "header cut short (read %zd of %zu bytes)", got, sizeof(h));
  }
  if (h.magic != kMagic) {
    return format_error(path, "bad magic 0x%08" PRIx32 " (a control block has 0x%08" PRIx32 ")",
                        h.magic, kMagic);
  }
  if (h.version != kVersion) {
    return format_error(path, "version %" PRIu32 ", this build reads version %" PRIu32, h.version,
                        kVersion);
  }
  if (h.header_size != kHeaderSize || h.slot_size != kSlotSize) {
    return format_error(path,
                        "header size %" PRIu32 " and slot size %" PRIu32 " (version 1 has %" PRIu32
                        " and %" PRIu32 ")",
                        h.header_size, h.slot_size, kHeaderSize, kSlotSize);
  }
  if (h.num_slots < 1 || h.num_slots > static_cast<uint32_t>(kMaxSlots)) {
    return format_error(path, "%" PRIu32 " slots, outside 1..%d", h.num_slots, kMaxSlots);
  }
  const int num_slots = static_cast<int>(h.num_slots);
  const size_t size = file_size_for(num_slots);
  if (file_size < size) {
    return format_error(path, "%" PRIu64 " bytes, too short for %d slots (%zu bytes)", file_size,
                        num_slots, size);
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return util::Status(errno, "map control block " + path);
  return ControlBlock(path, base, size, num_slots);
}

ControlBlock::ControlBlock(std::string path, void* base, size_t size, int num_slots)
    : path_(std::move(path)), base_(base), size_(size), num_slots_(num_slots) {}

ControlBlock::ControlBlock(ControlBlock&& other) noexcept
    : path_(std::move(other.path_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      num_slots_(std::exchange(other.num_slots_, 0)),
      stuck_timeout_(other.stuck_timeout_) {}

ControlBlock& ControlBlock::operator=(ControlBlock&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, size_);
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    num_slots_ = std::exchange(other.num_slots_, 0);
    stuck_timeout_ = other.stuck_timeout_;
  }
  return *this;
}

ControlBlock::~ControlBlock() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

void* ControlBlock::slot_bytes(int local_rank) const {
  if (local_rank < 0 || local_rank >= num_slots_) {
    // A caller's bug, not bad input: the agent and SDK know the local world size.
    std::fprintf(stderr, "control block %s: slot %d of %d\n", path_.c_str(), local_rank,
                 num_slots_);
    std::abort();
  }
  return static_cast<char*>(base_) + kHeaderSize + static_cast<size_t>(local_rank) * kSlotSize;
}

uint64_t ControlBlock::publish_event(const Event& event) {
  Header* h = static_cast<Header*>(base_);
  char reason[kReasonSize] = {};
  std::memcpy(reason, event.reason.data(), utf8_prefix(event.reason, kReasonSize - 1));
  uint64_t words[kReasonSize / 8];
  std::memcpy(words, reason, sizeof(words));

  const uint64_t event_seq = load(h->event_seq, std::memory_order_relaxed) + 1;
  const uint64_t odd = begin_write(h->seq);
  store(h->generation, event.generation);
  store(h->event_seq, event_seq);
  store(h->stop_step, event.stop_step);
  store(h->event_kind, static_cast<uint32_t>(event.kind));
  store(h->next_world_size, event.next_world_size);
  store(h->deadline_unix_ms, event.deadline_unix_ms);
  store_words(h->reason, words, kReasonSize / 8);
  end_write(h->seq, odd);
  return event_seq;
}

void ControlBlock::set_stop_step(int64_t stop_step) {
  Header* h = static_cast<Header*>(base_);
  const uint64_t odd = begin_write(h->seq);
  store(h->stop_step, stop_step);
  end_write(h->seq, odd);
}

void ControlBlock::reset(uint64_t generation) {
  Header* h = static_cast<Header*>(base_);
  const uint64_t zeros[kReasonSize / 8] = {};
  const uint64_t odd = begin_write(h->seq);
  store(h->generation, generation);
  store(h->stop_step, int64_t{-1});
  store(h->event_kind, static_cast<uint32_t>(EventKind::none));
  store(h->next_world_size, int32_t{-1});
  store(h->deadline_unix_ms, uint64_t{0});
  store_words(h->reason, zeros, kReasonSize / 8);
  end_write(h->seq, odd);

  for (int i = 0; i < num_slots_; ++i) clear_slot(i);
}

void ControlBlock::clear_slot(int local_rank) {
  SlotView empty;
  empty.loss = std::numeric_limits<double>::quiet_NaN();
  empty.tokens_per_s = std::numeric_limits<double>::quiet_NaN();
  write_slot(local_rank, empty);
}

util::Status ControlBlock::unlink() {
  // The next round's assignment beside it (--inprocess-restart), if any.
  ::unlink(assignment_path(path_).c_str());
  if (::unlink(path_.c_str()) != 0) return util::Status(errno, "remove control block " + path_);
  return util::Status::ok();
}

ControlBlock::Event ControlBlock::read_event() const {
  const Header* h = static_cast<Header*>(base_);
  Event e;
  uint64_t words[kReasonSize / 8];
  read_consistent(h->seq, stuck_timeout_, [&] {
    e.generation = load(h->generation, std::memory_order_acquire);
    e.event_seq = load(h->event_seq, std::memory_order_acquire);
    e.stop_step = load(h->stop_step, std::memory_order_acquire);
    e.kind = static_cast<EventKind>(load(h->event_kind, std::memory_order_acquire));
    e.next_world_size = load(h->next_world_size, std::memory_order_acquire);
    e.deadline_unix_ms = load(h->deadline_unix_ms, std::memory_order_acquire);
    load_words(words, h->reason, kReasonSize / 8);
  });
  char reason[kReasonSize];
  std::memcpy(reason, words, sizeof(reason));
  // A file not written by us may lack the NUL: never read past the field.
  e.reason.assign(reason, ::strnlen(reason, sizeof(reason)));
  return e;
}

void ControlBlock::set_agent_flags(uint32_t flags) {
  store(static_cast<Header*>(base_)->agent_flags, flags);
}

uint32_t ControlBlock::agent_flags() const {
  return load(static_cast<const Header*>(base_)->agent_flags, std::memory_order_acquire);
}

uint64_t ControlBlock::header_seq() const {
  return load(static_cast<const Header*>(base_)->seq, std::memory_order_acquire);
}

ControlBlock::SlotView ControlBlock::read_slot(int local_rank) const {
  const Slot* s = static_cast<Slot*>(slot_bytes(local_rank));
  SlotView v;
  uint64_t name = 0;
  read_consistent(s->seq, stuck_timeout_, [&] {
    v.step = load(s->step, std::memory_order_acquire);
    v.timestamp_ns = load(s->timestamp_ns, std::memory_order_acquire);
    v.loss = std::bit_cast<double>(load(s->loss, std::memory_order_acquire));
    v.tokens_per_s = std::bit_cast<double>(load(s->tokens_per_s, std::memory_order_acquire));
    v.flags = load(s->flags, std::memory_order_acquire);
    v.pid = load(s->pid, std::memory_order_acquire);
    v.compute_us = load(s->compute_us, std::memory_order_acquire);
    v.section_limit_s = load(s->section_limit_s, std::memory_order_acquire);
    name = load(s->section_name, std::memory_order_acquire);
  });
  char text[sizeof name + 1] = {};
  std::memcpy(text, &name, sizeof name);
  v.section = text;  // stops at the first NUL
  return v;
}

void ControlBlock::write_slot(int local_rank, const SlotView& view) {
  Slot* s = static_cast<Slot*>(slot_bytes(local_rank));
  const uint64_t odd = begin_write(s->seq);
  store(s->step, view.step);
  store(s->timestamp_ns, view.timestamp_ns);
  store(s->loss, std::bit_cast<uint64_t>(view.loss));
  store(s->tokens_per_s, std::bit_cast<uint64_t>(view.tokens_per_s));
  store(s->flags, view.flags);
  store(s->pid, view.pid);
  store(s->compute_us, view.compute_us);
  store(s->section_limit_s, view.section_limit_s);
  // Cut at a UTF-8 character boundary, as the Python SDK cuts it.
  size_t n = std::min(view.section.size(), sizeof(uint64_t));
  while (n > 0 && n < view.section.size() &&
         (static_cast<unsigned char>(view.section[n]) & 0xC0) == 0x80) {
    --n;
  }
  uint64_t name = 0;
  std::memcpy(&name, view.section.data(), n);
  store(s->section_name, name);
  end_write(s->seq, odd);
}

int64_t ControlBlock::max_step() const {
  // step alone is one atomic word: no seqlock needed for it.
  int64_t best = -1;
  for (int i = 0; i < num_slots_; ++i) {
    const int64_t step = load(static_cast<Slot*>(slot_bytes(i))->step, std::memory_order_acquire);
    if (step > best) best = step;
  }
  return best;
}

bool ControlBlock::attached(int local_rank) const {
  return (load(static_cast<Slot*>(slot_bytes(local_rank))->flags, std::memory_order_acquire) &
          kFlagAttached) != 0;
}

bool ControlBlock::any_attached() const {
  for (int i = 0; i < num_slots_; ++i) {
    if (attached(i)) return true;
  }
  return false;
}

uint64_t ControlBlock::now_realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace elasticrun::control
