"""The worker's view of the per-node control block (docs/protocol.md, "The
control block"): a memory-mapped file the agent writes the pending scale
event into and each local rank writes its progress into.

Reads cost no system call: the file is mapped once, and checking for a new
event is one 8-byte load of the header's seqlock (`ControlBlock.event()`
returns the cached snapshot while it is unchanged). Writes to the own slot
are a few stores into the mapping.

Memory model. Sequence numbers are loaded and stored through a memoryview of
format "Q", which CPython reads and writes with one naturally aligned 8-byte
access; x86-64 and aarch64 make those single-copy atomic, so a sequence
number is never seen half-written. Other fields are copied with
struct.unpack_from / slice assignment, possibly byte by byte; a copy that
raced with a writer is caught by the seqlock (the number before and after
differ, or is odd) and retried. On x86-64 (TSO: loads are not reordered with
loads, nor stores with stores) that is the whole argument. aarch64 allows
such reordering and Python has no fence; there the protocol relies on the
thousands of instructions the interpreter executes between the accesses,
which is not an architectural guarantee (see docs/protocol.md).
"""

from __future__ import annotations

import enum
import mmap
import os
import struct
import sys
import time
from typing import NamedTuple, Optional

MAGIC = 0x42435245  # b"ERCB" in memory
VERSION = 1
HEADER_SIZE = 256
SLOT_SIZE = 64
MAX_SLOTS = 65536
REASON_SIZE = 128

# Header flags (the agent's). A fixed job's agent (static, standalone)
# publishes no scale events.
AGENT_FIXED = 1 << 0
# --inprocess-restart: workers may park when their round ends and re-form
# with the next round's assignment (elasticrun.inprocess).
AGENT_INPROCESS = 1 << 1

FLAG_ATTACHED = 1 << 0  # an SDK opened the block and handles SIGUSR1
FLAG_STOPPED = 1 << 1  # reached the stop step, checkpointing
FLAG_SAVED = 1 << 2  # its checkpoint shard is written
FLAG_IN_SECTION = 1 << 3  # in a marked section (evaluation, a save): no step is due
FLAG_LOSS_NONFINITE = 1 << 4  # a loss reported since attach was NaN or infinite
FLAG_STACKS = 1 << 5  # dumps its Python stacks on ELASTICRUN_STACK_SIGNAL
FLAG_INPROCESS = 1 << 6  # re-forms in process: parks at the end of a round
FLAG_PARKED = 1 << 7  # left its round; waits for the next assignment
SECTION_NAME_SIZE = 8  # bytes of a section's name the slot keeps

# How long a reader retries while a seqlock stays odd at one value (its
# writer died mid-update, or is descheduled that long); then it takes what it
# copies, as the C++ reader does.
STUCK_WRITER_TIMEOUT_S = 0.1

_PREFIX = struct.Struct("<6I")  # magic, version, header_size, slot_size, num_slots, agent_flags
# generation, event_seq, stop_step, event_kind, next_world_size, deadline_unix_ms, reason
_EVENT = struct.Struct("<QQqIiQ%ds" % REASON_SIZE)
_EVENT_OFFSET = 32
_HEADER_SEQ = 24 // 8  # index into the "Q" view
# step, timestamp_ns, loss, tokens_per_s, flags, pid, compute_us, section_limit_s, section
_SLOT = struct.Struct("<qQddIIII8s")
_SLOT_DATA = 8  # offset of step inside a slot

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("the elasticrun control block is little-endian; this host is not")


class EventKind(enum.IntEnum):
    NONE = 0
    SCALE_UP = 1
    SCALE_DOWN = 2
    REPLACE = 3
    SHUTDOWN = 4
    RESTART = 5
    REFORM = 6  # the next round's assignment is ready for parked workers


def kind_name(kind: int) -> str:
    """'scale_down' etc., as the C++ side prints it; 'unknown' for other values."""
    try:
        return EventKind(kind).name.lower()
    except ValueError:
        return "unknown"


class Event(NamedTuple):
    generation: int
    event_seq: int  # 0: no event published yet; +1 per event, never reset
    stop_step: int  # -1: no agreed stop step yet
    kind: int  # an EventKind value (a newer agent may send others)
    next_world_size: int  # -1: unknown
    deadline_unix_ms: int  # 0: none
    reason: str

    @property
    def pending(self) -> bool:
        """An event of this generation is out (kind other than none)."""
        return self.kind != EventKind.NONE


class Slot(NamedTuple):
    step: int  # -1: none published yet
    timestamp_ns: int
    loss: float  # NaN: none (FLAG_LOSS_NONFINITE says when it was reported so)
    tokens_per_s: float  # NaN: none
    flags: int
    pid: int
    compute_us: int = 0  # the last step's compute time; 0: none
    section_limit_s: int = 0  # FLAG_IN_SECTION: the section's own limit; 0: none
    section: str = ""  # FLAG_IN_SECTION: its name (at most SECTION_NAME_SIZE bytes)


def _slot(fields) -> Slot:
    *head, name = fields
    return Slot(*head, name.split(b"\0", 1)[0].decode("utf-8", errors="replace"))


class ControlBlockError(Exception):
    """The file is not a control block this SDK can read."""


class ControlBlock:
    """A mapped control block.

    local_rank: when given, the slot this process owns; ATTACHED is set in it
    at open. Set it only once a SIGUSR1 handler is installed: the agent
    signals attached workers, and SIGUSR1's default action kills.
    """

    def __init__(self, path: str, local_rank: Optional[int] = None):
        self.path = str(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            self.num_slots = self._validate(fd)
            size = HEADER_SIZE + SLOT_SIZE * self.num_slots
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the file
        self._q = memoryview(self._mm).cast("Q")
        self._pid = os.getpid()
        self._cached_seq = -1  # never a real value: the first event() reads
        self._cached_event: Optional[Event] = None
        self.local_rank = local_rank
        if local_rank is not None:
            self._check_rank(local_rank)
            self.set_flags(local_rank, FLAG_ATTACHED)

    def _validate(self, fd: int) -> int:
        size = os.fstat(fd).st_size
        if size < HEADER_SIZE:
            raise ControlBlockError(
                f"control block {self.path}: {size} bytes, shorter than the "
                f"{HEADER_SIZE}-byte header"
            )
        magic, version, header_size, slot_size, num_slots, _ = _PREFIX.unpack(
            os.pread(fd, _PREFIX.size, 0)
        )
        if magic != MAGIC:
            raise ControlBlockError(
                f"control block {self.path}: bad magic 0x{magic:08x} "
                f"(a control block has 0x{MAGIC:08x})"
            )
        if version != VERSION:
            raise ControlBlockError(
                f"control block {self.path}: version {version}, this SDK reads version {VERSION}"
            )
        if header_size != HEADER_SIZE or slot_size != SLOT_SIZE:
            raise ControlBlockError(
                f"control block {self.path}: header size {header_size} and slot size "
                f"{slot_size} (version 1 has {HEADER_SIZE} and {SLOT_SIZE})"
            )
        if not 1 <= num_slots <= MAX_SLOTS:
            raise ControlBlockError(
                f"control block {self.path}: {num_slots} slots, outside 1..{MAX_SLOTS}"
            )
        need = HEADER_SIZE + SLOT_SIZE * num_slots
        if size < need:
            raise ControlBlockError(
                f"control block {self.path}: {size} bytes, too short for {num_slots} slots "
                f"({need} bytes)"
            )
        return num_slots

    @property
    def agent_flags(self) -> int:
        """The header's AGENT_* bits (written once, before any worker starts)."""
        return struct.unpack_from("<I", self._mm, 20)[0]

    @property
    def fixed(self) -> bool:
        """The agent runs a fixed job (static, standalone): no scale events come."""
        return bool(self.agent_flags & AGENT_FIXED)

    @property
    def inprocess(self) -> bool:
        """The agent re-forms parked workers in process (--inprocess-restart)."""
        return bool(self.agent_flags & AGENT_INPROCESS)

    def close(self) -> None:
        if self._mm is not None:
            self._q.release()  # mmap refuses to close while a view exports it
            self._mm.close()
            self._mm = None

    def __enter__(self) -> "ControlBlock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_rank(self, local_rank: int) -> None:
        if not 0 <= local_rank < self.num_slots:
            raise IndexError(
                f"control block {self.path}: slot {local_rank} of {self.num_slots} "
                "(is LOCAL_RANK right?)"
            )

    def _read_consistent(self, seq_index: int, unpack):
        """Runs unpack() between two equal, even loads of the sequence number."""
        q = self._q
        odd_seen = 0
        odd_since = 0.0
        while True:
            before = q[seq_index]
            if not before & 1:
                value = unpack()
                if q[seq_index] == before:
                    return before, value
            elif before != odd_seen:
                odd_seen, odd_since = before, time.monotonic()
            elif time.monotonic() - odd_since >= STUCK_WRITER_TIMEOUT_S:
                return before, unpack()

    # --- the header (the agent writes it)

    def read_event(self) -> Event:
        """A consistent snapshot of the event fields."""
        seq, event = self.snapshot_event()
        self._cached_seq, self._cached_event = seq, event
        return event

    def snapshot_event(self) -> tuple[int, Event]:
        """(the header's seqlock value, the event) without touching the cache
        event() keeps, so that another thread may call it."""
        seq, fields = self._read_consistent(
            _HEADER_SEQ, lambda: _EVENT.unpack_from(self._mm, _EVENT_OFFSET)
        )
        gen, event_seq, stop, kind, world, deadline, raw = fields
        reason = raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")
        return seq, Event(gen, event_seq, stop, kind, world, deadline, reason)

    def header_seq(self) -> int:
        """The header's seqlock: it changes with every update of the header."""
        return self._q[_HEADER_SEQ]

    def event(self) -> Event:
        """read_event(), but while the header's sequence number has not moved
        since the last read, the cached snapshot: one 8-byte load."""
        if self._q[_HEADER_SEQ] == self._cached_seq:
            return self._cached_event
        return self.read_event()

    # --- slots (local rank i's worker writes slot i)

    def read_slot(self, local_rank: int) -> Slot:
        self._check_rank(local_rank)
        off = HEADER_SIZE + SLOT_SIZE * local_rank + _SLOT_DATA
        _, fields = self._read_consistent(
            (HEADER_SIZE + SLOT_SIZE * local_rank) // 8, lambda: _SLOT.unpack_from(self._mm, off)
        )
        return _slot(fields)

    def write_slot(
        self,
        local_rank: int,
        step: int,
        loss: Optional[float] = None,
        tokens_per_s: Optional[float] = None,
        flags: Optional[int] = None,
        timestamp_ns: Optional[int] = None,
        compute_us: Optional[int] = None,
    ) -> None:
        """Publishes step (with the time now, CLOCK_REALTIME) as one seqlock
        update. loss, tokens_per_s, flags and compute_us left as None keep the
        slot's values (the last reported metrics); pass float('nan') to clear a
        metric. Only this slot's owner may call it."""
        self._check_rank(local_rank)
        base = HEADER_SIZE + SLOT_SIZE * local_rank
        # We are the slot's only writer: our own last values need no lock.
        old = _SLOT.unpack_from(self._mm, base + _SLOT_DATA)
        loss = old[2] if loss is None else loss
        tokens_per_s = old[3] if tokens_per_s is None else tokens_per_s
        flags = old[4] if flags is None else flags
        compute_us = old[6] if compute_us is None else max(0, min(int(compute_us), 0xFFFFFFFF))
        data = _SLOT.pack(
            step,
            time.time_ns() if timestamp_ns is None else timestamp_ns,
            loss,
            tokens_per_s,
            flags,
            self._pid,
            compute_us,
            old[7],
            old[8],
        )
        self._publish(base, data)

    def set_flags(self, local_rank: int, set_bits: int = 0, clear_bits: int = 0) -> None:
        """Sets and clears flag bits of the own slot; the step is kept."""
        self._check_rank(local_rank)
        base = HEADER_SIZE + SLOT_SIZE * local_rank
        fields = list(_SLOT.unpack_from(self._mm, base + _SLOT_DATA))
        fields[4] = (fields[4] | set_bits) & ~clear_bits
        fields[5] = self._pid
        self._publish(base, _SLOT.pack(*fields))

    def set_section(self, local_rank: int, name: Optional[str], limit_s: int = 0) -> None:
        """Marks the own slot as in the section `name` (limit_s: its own
        limit in seconds, 0 for none), or out of any section with None."""
        self._check_rank(local_rank)
        base = HEADER_SIZE + SLOT_SIZE * local_rank
        fields = list(_SLOT.unpack_from(self._mm, base + _SLOT_DATA))
        if name is None:
            fields[4] &= ~FLAG_IN_SECTION
            fields[7], fields[8] = 0, b""
        else:
            fields[4] |= FLAG_IN_SECTION
            fields[7] = max(0, min(int(limit_s), 0xFFFFFFFF))
            fields[8] = _cut_utf8(name.encode("utf-8"), SECTION_NAME_SIZE)
        fields[5] = self._pid
        self._publish(base, _SLOT.pack(*fields))

    def _publish(self, base: int, data: bytes) -> None:
        q = self._q
        index = base // 8
        # An odd number was left by a writer that died mid-update: take it over.
        odd = q[index] | 1
        try:
            q[index] = odd
            self._mm[base + _SLOT_DATA : base + _SLOT_DATA + len(data)] = data
        finally:
            # Also on KeyboardInterrupt: a slot left odd would stall readers.
            q[index] = odd + 1

    def max_step(self) -> int:
        return max(self.read_slot(i).step for i in range(self.num_slots))


def _cut_utf8(data: bytes, limit: int) -> bytes:
    """data cut to at most `limit` bytes without splitting a UTF-8 character."""
    if len(data) <= limit:
        return data
    cut = limit
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut]
