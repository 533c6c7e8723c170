// The per-node control block: a small memory-mapped file the agent shares
// with its workers (layout, version 1, in docs/protocol.md, "The control
// block"). The agent writes the header (generation, the pending scale event
// and its agreed stop step); local rank i's worker writes slot i (its step,
// a timestamp, its last metrics, flags). Both sides read the other's part
// with plain loads, no system call, through a seqlock per region.
//
// Writers: one per region. The header is written by one agent thread at a
// time, slot i by local rank i's worker; the caller serialises. Readers may
// run concurrently with the writer, in any number, in any process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/result.hpp"

namespace elasticrun::control {

inline constexpr uint32_t kMagic = 0x42435245;  // "ERCB" in memory (little-endian)
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderSize = 256;
inline constexpr uint32_t kSlotSize = 64;
inline constexpr size_t kReasonSize = 128;  // bytes, NUL included
// More local ranks than any node has; bounds what a corrupt file can make
// open() map (4 MiB).
inline constexpr int kMaxSlots = 65536;

// Slot flags, written by the worker's SDK.
inline constexpr uint32_t kFlagAttached = 1u << 0;  // opened the block, handles SIGUSR1
inline constexpr uint32_t kFlagStopped = 1u << 1;   // reached the stop step, checkpointing
inline constexpr uint32_t kFlagSaved = 1u << 2;     // its checkpoint shard is written
// In a section the worker marked (evaluation, a checkpoint save): no step
// is due until it ends, or until its own limit (section_limit_s) passes.
inline constexpr uint32_t kFlagInSection = 1u << 3;
// A loss it reported since it attached was NaN or infinite (sticky: the
// agent samples, and the next finite loss must not hide it; the loss field
// alone cannot say, NaN there also means "none reported").
inline constexpr uint32_t kFlagLossNonFinite = 1u << 4;
// It writes its threads' Python stacks to ELASTICRUN_STACK_FILE when it
// receives ELASTICRUN_STACK_SIGNAL (faulthandler).
inline constexpr uint32_t kFlagStacks = 1u << 5;
// It re-forms in process (--inprocess-restart): when its round ends it
// parks instead of exiting, so the agent does not signal it.
inline constexpr uint32_t kFlagInprocess = 1u << 6;
// It left its round (its process group is torn down) and waits for the
// next round's assignment (EventKind::reform).
inline constexpr uint32_t kFlagParked = 1u << 7;
// The longest section name a slot keeps (longer names are cut).
inline constexpr size_t kSectionNameSize = 8;

// Header flags, written by the agent once, before any worker starts.
// The agent of a fixed job (static, standalone) publishes no scale events:
// its workers' SDK answers elastic_event_detected() as without a block.
inline constexpr uint32_t kAgentFixed = 1u << 0;
// --inprocess-restart: workers may park at the end of a round and re-form
// with the next one's assignment instead of exiting.
inline constexpr uint32_t kAgentInprocess = 1u << 1;

enum class EventKind : uint32_t {
  none = 0,
  scale_up = 1,
  scale_down = 2,
  replace = 3,
  shutdown = 4,
  restart = 5,
  // The next round's assignment is ready for parked workers: generation is
  // the new round, next_world_size its world size; the environment of each
  // local rank is in the assignment file (control/assignment.hpp).
  reform = 6,
};

// "scale_up", ...; "unknown" for a value outside the enum (a newer agent or a
// corrupt file).
const char* to_string(EventKind kind);

class ControlBlock {
 public:
  struct Event {
    uint64_t generation = 0;
    uint64_t event_seq = 0;  // assigned by publish_event; ignored there
    int64_t stop_step = -1;  // -1: no agreed stop step yet
    EventKind kind = EventKind::none;
    int32_t next_world_size = -1;   // -1: unknown
    uint64_t deadline_unix_ms = 0;  // 0: none
    std::string reason;  // at most kReasonSize-1 bytes are stored (cut at a UTF-8 boundary)
  };

  struct SlotView {
    int64_t step = -1;          // -1: none published yet
    uint64_t timestamp_ns = 0;  // CLOCK_REALTIME when step was published
    double loss = 0;            // NaN: none
    double tokens_per_s = 0;    // NaN: none
    uint32_t flags = 0;         // kFlag*
    uint32_t pid = 0;
    uint32_t compute_us = 0;       // the last step's compute time (SDK-timed); 0: none
    uint32_t section_limit_s = 0;  // kFlagInSection: the section's own limit; 0: none
    std::string section;           // kFlagInSection: its name, at most kSectionNameSize bytes
  };

  // Agent side. Creates the file exclusively (O_EXCL, mode 0600) and maps
  // it: generation 0, no event, every slot step -1, metrics NaN, flags 0.
  // An existing file at path is an error (EEXIST) naming it: the agent picks
  // a fresh path per run rather than trusting a leftover. On any failure the
  // file it created is removed again. num_slots: 1..kMaxSlots.
  static util::Result<ControlBlock> create(const std::string& path, int num_slots);

  // Worker (and test) side. Maps an existing block read-write after checking
  // magic, version, header and slot sizes, num_slots and that the file holds
  // every slot; EINVAL with a message saying which, otherwise the errno of
  // open/fstat/mmap. Any file content is safe to open: this is what
  // test/fuzz/control_block_fuzz.cpp exercises. Nobody may truncate the file
  // while it is mapped (accesses past the new end raise SIGBUS).
  static util::Result<ControlBlock> open(const std::string& path);

  ControlBlock(ControlBlock&& other) noexcept;
  ControlBlock& operator=(ControlBlock&& other) noexcept;
  ControlBlock(const ControlBlock&) = delete;
  ControlBlock& operator=(const ControlBlock&) = delete;
  ~ControlBlock();  // unmaps; never removes the file (see unlink)

  // --- agent side (header writer)

  // Publishes event (every field but event_seq, which becomes the previous
  // value + 1) as one seqlock update; returns the new event_seq.
  uint64_t publish_event(const Event& event);
  // Sets the stop step of the current event (the leader agrees on it after
  // the event was published); nothing else changes.
  void set_stop_step(int64_t stop_step);
  // A new rendezvous round: generation, no event (kind none, stop_step -1,
  // next_world_size -1, no deadline, no reason), and every slot back to
  // step -1, metrics NaN, flags 0, pid 0. event_seq is kept, so it counts
  // events over the block's life. Call it only while no worker runs: it
  // writes the slots, which otherwise belong to the workers.
  void reset(uint64_t generation);
  // Empties slot local_rank (as reset does every slot) for a worker that
  // is gone, before its replacement starts: only while no process of that
  // local rank runs.
  void clear_slot(int local_rank);
  // The header's agent flags (kAgent*): set once, before any worker starts.
  void set_agent_flags(uint32_t flags);
  uint32_t agent_flags() const;
  // Removes the file, and the assignment file beside it (control/assignment;
  // the agent, at exit). The mapping stays valid.
  util::Status unlink();

  // --- readers (any side)

  // A consistent snapshot of the header's event fields.
  Event read_event() const;
  // The header's seqlock (one acquire load): it changes with every update of
  // the header, so a reader that cached read_event() under the value loaded
  // before that read may keep its copy while this returns the same value.
  uint64_t header_seq() const;
  // A consistent snapshot of slot local_rank (0 <= local_rank < num_slots(),
  // checked: a bad index aborts).
  SlotView read_slot(int local_rank) const;
  // The highest step any slot has published; -1 when none has.
  int64_t max_step() const;
  bool attached(int local_rank) const;
  bool any_attached() const;

  // --- worker side (slot writer)

  // Writes every field of view into slot local_rank as one seqlock update.
  void write_slot(int local_rank, const SlotView& view);

  int num_slots() const { return num_slots_; }
  const std::string& path() const { return path_; }

  // How long a reader keeps retrying while a region's seqlock stays odd at
  // the same value. That only happens when its writer died between the two
  // halves of an update (a worker SIGKILLed mid-write) or is descheduled for
  // that long; past it the reader returns what it copies, each field intact
  // but possibly from two updates. The next update by that region's writer
  // repairs the seqlock. Default 100 ms; the fuzz target sets 0.
  void set_stuck_writer_timeout(std::chrono::nanoseconds timeout) { stuck_timeout_ = timeout; }

  // CLOCK_REALTIME in nanoseconds, for SlotView::timestamp_ns.
  static uint64_t now_realtime_ns();

 private:
  ControlBlock(std::string path, void* base, size_t size, int num_slots);

  // Slot local_rank's bytes; aborts on an index outside 0..num_slots-1.
  void* slot_bytes(int local_rank) const;

  std::string path_;
  void* base_ = nullptr;
  size_t size_ = 0;
  int num_slots_ = 0;
  std::chrono::nanoseconds stuck_timeout_ = std::chrono::milliseconds(100);
};

}  // namespace elasticrun::control
