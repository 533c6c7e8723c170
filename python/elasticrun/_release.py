"""Releasing a worker from a collective that will never finish.

When a round ends by a failure (a worker died or hung, a node was lost,
on this node or another), the survivors are often blocked inside a
collective with a peer that is gone, stopped or cut off: gloo waits for its
timeout (30 minutes by default), NCCL for its own (10). The agent publishes
the failure in the control block; a thread of the SDK watches for it and
releases the process's collectives, so the blocked call raises at once and
the training loop's error handler can save a rescue (checkpoint.py) while
the agent's rescue window lasts.

How, per backend, in torch 2.x:
- NCCL: torch.distributed's process-group abort (ncclCommAbort).
- gloo: ProcessGroupGloo has no abort (the base class's is a no-op), so the
  connections are shut down instead: every established TCP socket of this
  process except those of the store (MASTER_ADDR:MASTER_PORT), which the
  rescue still uses. The blocked collective then raises "Connection closed
  by peer" within milliseconds. Listening sockets are left alone: gloo's
  listener aborts the process when its socket is shut down under it.

The watcher never imports torch: a process that has not imported
torch.distributed has no collective to release.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Optional

from ._control import ControlBlock, EventKind

# Events after which no collective of the round can complete: a failure, a
# lost member, the job's end. Scale events are voluntary: every rank stops
# at the agreed step, collectives intact.
FAILURE_KINDS = frozenset({EventKind.RESTART, EventKind.REPLACE, EventKind.SHUTDOWN})
POLL_S = 0.05


def failed(event) -> bool:
    """Whether the event ends its round by a failure (not at an agreed step)."""
    return event.kind in FAILURE_KINDS and event.stop_step < 0

_ESTABLISHED = "01"


def _tcp_inodes(store_port: Optional[int]) -> set[int]:
    """Inodes of established TCP sockets in this network namespace whose
    local or remote port is not the store's (all of them without one)."""
    inodes: set[int] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _ESTABLISHED:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if store_port is not None and store_port in (local_port, remote_port):
                continue
            inodes.add(int(fields[9]))
    return inodes


def _socket_fds() -> dict[int, int]:
    """This process's sockets: inode -> one descriptor of it."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.setdefault(int(target[8:-1]), int(name))
    return out


def socket_inodes() -> set[int]:
    """Inodes of every socket this process holds now."""
    return set(_socket_fds())


def shutdown_sockets(inodes: set[int]) -> int:
    """Shuts down (both ways) this process's established TCP connections
    among `inodes`; returns how many. Never a listening socket: gloo's
    listener aborts the process when its socket is shut down under it."""
    wanted = inodes & _tcp_inodes(None)
    done = 0
    for inode, fd in _socket_fds().items():
        if inode not in wanted:
            continue
        try:
            # A duplicate: shutdown acts on the connection, close on our copy only.
            s = socket.socket(fileno=os.dup(fd))
            try:
                s.shutdown(socket.SHUT_RDWR)
                done += 1
            finally:
                s.close()
        except OSError:
            pass
    return done


def shutdown_peer_sockets(store_port: Optional[int]) -> int:
    """Shuts down this process's established TCP connections other than the
    store's; returns how many."""
    return shutdown_sockets(_tcp_inodes(store_port))


class Join:
    """A worker joining a round in process (elasticrun.inprocess: the
    process group's start, the state's broadcast). A round that fails then
    has no rescue to keep the store for, and the wait to break may be on
    the store itself (init_process_group waiting for a rank that never
    comes): the releaser shuts down the TCP connections the process opened
    since the join began, the store's included, and again at each look
    while the failure stands (one opened after the first cut). Connections
    open before the join (a logger's, a data loader's) are left alone.

    It also knows the newest round the process has joined: a failure of an
    earlier one that the releaser sees late (the process has parked and
    begun the next join meanwhile) must not release the new round's
    collectives. `lock` is held across a release, so that no join begins
    in the middle of one."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._before: Optional[set[int]] = None
        self.generation = -1  # the round being joined
        self.newest = -1  # the newest round begun (-1: not in process)

    def begin(self, generation: int) -> None:
        with self.lock:
            if self._before is None:
                self._before = socket_inodes()
            self.generation = generation
            self.newest = max(self.newest, generation)

    def end(self) -> None:
        with self.lock:
            self._before = None
            self.generation = -1

    def moved_past(self, generation: int) -> bool:
        """Whether the process has begun a round after `generation`."""
        return generation < self.newest

    def cut(self, generation: int) -> Optional[int]:
        """Shuts down the connections of a join of round `generation` (or of
        an earlier one, which ended too); None when no such join is under way."""
        with self.lock:
            if self._before is None or self.generation > generation:
                return None
            return shutdown_sockets(_tcp_inodes(None) - self._before)


joining = Join()


def release_collectives(generation: int) -> Optional[str]:
    """Makes every blocked collective of round `generation` raise; returns
    what was done (for the log line), None when there was nothing to release
    (the process is in a later round already)."""
    with joining.lock:
        if joining.moved_past(generation):
            return None
        done = []
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            backend = str(dist.get_backend())
            if "nccl" in backend:
                try:
                    from torch.distributed import distributed_c10d as c10d

                    c10d._abort_process_group()
                    done.append("aborted the NCCL process group")
                except Exception as e:  # an older torch without it: the NCCL timeout stands
                    done.append(f"no NCCL abort ({e})")
            if "gloo" in backend:
                port = os.environ.get("MASTER_PORT")
                n = shutdown_peer_sockets(int(port) if port and port.isdigit() else None)
                done.append(f"shut down {n} gloo connection(s)")
            if not done:
                done.append(f"nothing to do for backend {backend}")
        n = joining.cut(generation)
        if n is not None:
            done.append(f"shut down {n} connection(s) of the round being joined")
        return "; ".join(done) or None


class Releaser(threading.Thread):
    """Watches the control block's event for a failure of the worker's round
    and then releases its collectives, once per round."""

    def __init__(self, block: ControlBlock, rank: str):
        super().__init__(name="elasticrun-release", daemon=True)
        self._block = block
        self._rank = rank
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        seen, event = -1, None
        released = None  # the round whose collectives were released
        while not self._stop.wait(POLL_S):
            try:
                if self._block.header_seq() != seen:
                    # Not read_event(): its cache belongs to the main thread.
                    seen, event = self._block.snapshot_event()
            except (ValueError, TypeError):  # the block was closed
                return
            if event is None or not failed(event):
                continue
            if event.generation == released:
                # A join of the failed round under way: what it opened since.
                joining.cut(event.generation)
                continue
            # Once per round: a worker that re-forms in process
            # (elasticrun.inprocess) goes on into the next one.
            released = event.generation
            what = release_collectives(event.generation)
            if what is not None:
                rank = os.environ.get("RANK", self._rank)
                print(f"elasticrun: rank {rank}: the round ended ({event.reason}); "
                      f"{what}", file=sys.stderr, flush=True)
