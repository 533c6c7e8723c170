"""elasticrun's worker SDK (minimal; the full SDK comes later).

A training script calls attach() once, step(n) after each step, and
elastic_event_detected() to learn that the job is being resized:

    import elasticrun
    elasticrun.attach()
    for step in range(start, total):
        with elasticrun.compute():        # optional: what the straggler monitor compares
            loss = train_step(...)
        elasticrun.step(step, loss=loss)  # the hang and non-finite-loss monitors read it
        if step % 1000 == 0:
            with elasticrun.section("eval", timeout=1800):   # long, and not a hang
                evaluate()
        if elasticrun.elastic_event_detected():
            save_checkpoint(step)
            elasticrun.saved()
            break

Under elasticrun the agent tells attached workers about a scale event with
SIGUSR1 and the node's control block (ELASTICRUN_CONTROL_FILE): the block
holds the step at which every rank of the job stops, so each rank stops at
the same step without a collective per step. Checks read the mapped block
and make no system call.

Under torchrun (no control file), and under a fixed elasticrun job
(static or standalone: its block publishes no scale events, only the
health monitors read it), elastic_event_detected() is always False,
unless HYPERPOD_SIGNAL_COORDINATION=distributed: then, as with AWS
hyperpodrun, it all-reduces (MAX) whether this rank received SIGUSR1 over
torch.distributed, so every rank sees a signal any rank received. It is
then a collective: every rank must call it at the same step.

State is per process and read from the environment on first use
(ELASTICRUN_CONTROL_FILE, LOCAL_RANK).
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import signal
import time
from typing import Iterator, Optional

from ._control import (
    FLAG_ATTACHED,
    FLAG_IN_SECTION,
    FLAG_LOSS_NONFINITE,
    FLAG_SAVED,
    FLAG_STACKS,
    FLAG_STOPPED,
    ControlBlock,
    ControlBlockError,
    Event,
    EventKind,
    Slot,
    kind_name,
)
from ._leave import LeaveSignals
from ._release import Releaser
from .batch import (
    BatchPlan,
    admissible_world_sizes,
    discrete_values_flag,
    load_overrides,
    micro_batch_sizes,
    plan_batches,
)



def _read_version() -> str:
    """The project's one version, CMakeLists.txt's project(): written into
    _version.py by the wheel's build; read from the source tree otherwise."""
    try:
        from ._version import VERSION

        return VERSION
    except ImportError:
        pass
    import re

    try:
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")) as f:
            m = re.search(r"project\(elasticrun VERSION ([0-9][0-9.]*)", f.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


__version__ = _read_version()

__all__ = [
    "attach",
    "step",
    "elastic_event_detected",
    "signal_received",
    "info",
    "heartbeat",
    "report",
    "stopped",
    "saved",
    "compute",
    "section",
    "process_group_timeout",
    "ControlBlock",
    "ControlBlockError",
    "Event",
    "EventKind",
    "Slot",
    "FLAG_ATTACHED",
    "FLAG_STOPPED",
    "FLAG_SAVED",
    "FLAG_IN_SECTION",
    "FLAG_LOSS_NONFINITE",
    "FLAG_STACKS",
    "BatchPlan",
    "plan_batches",
    "admissible_world_sizes",
    "discrete_values_flag",
    "load_overrides",
    "micro_batch_sizes",
    "ElasticSampler",
]


def __getattr__(name: str):
    # ElasticSampler subclasses torch's Sampler, and importing torch takes
    # seconds: only a program that asks for the sampler pays for it.
    if name == "ElasticSampler":
        from .sampler import ElasticSampler

        return ElasticSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CONTROL_FILE_ENV = "ELASTICRUN_CONTROL_FILE"
COORDINATION_ENV = "HYPERPOD_SIGNAL_COORDINATION"
# Where and on which signal the agent asks for this worker's Python stacks
# (a hang it is about to act on); the agent sets both, per local rank.
STACK_FILE_ENV = "ELASTICRUN_STACK_FILE"
STACK_SIGNAL_ENV = "ELASTICRUN_STACK_SIGNAL"


class _Session:
    """This process's link to its agent."""

    def __init__(self) -> None:
        self.control_file: Optional[str] = os.environ.get(CONTROL_FILE_ENV) or None
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.block: Optional[ControlBlock] = None
        self.attached = False
        self.signalled = False
        self.previous_handler = None
        self.last_step: Optional[int] = None
        self.compute_s: Optional[float] = None  # timed by compute(), for the next step()
        self.sections: list[tuple[str, int]] = []  # open section() blocks, innermost last
        self.stack_file = None  # kept open: faulthandler writes to its descriptor
        self.releaser = None  # the thread that releases collectives after a failure
        self.leave_signals: Optional[LeaveSignals] = None  # _leave.py

    def open_block(self) -> Optional[ControlBlock]:
        if self.block is None and self.control_file is not None:
            self.block = ControlBlock(self.control_file)
            self.block._check_rank(self.local_rank)
        return self.block


_session: Optional[_Session] = None


def _get() -> _Session:
    global _session
    if _session is None:
        _session = _Session()
    return _session


def _on_sigusr1(signum, frame) -> None:
    # Only a flag: the training loop acts on it at a step boundary.
    session = _get()
    session.signalled = True
    previous = session.previous_handler
    if callable(previous):
        previous(signum, frame)


def attach(release_collectives: bool = True) -> bool:
    """Handles SIGUSR1 (chaining a Python handler installed before) and,
    under elasticrun, marks this rank ATTACHED in the control block, which
    tells the agent it may signal it. Call it from the main thread, before
    training. Idempotent. True when a control block was found.

    release_collectives: when the round ends by a failure (here or on
    another node), a thread releases this process's collectives (the NCCL
    abort; for gloo, its connections are shut down), so that a call blocked
    on a dead or stuck peer raises at once instead of after the process
    group's timeout (_release.py).

    In an elastic job it also handles the signals the agent turns into a
    graceful leave (SIGTERM...): one that reaches this worker too, as
    SLURM's scancel does, waits for the agreed stop instead of killing it
    (_leave.py)."""
    session = _get()
    if not session.attached:
        # The handler first: once ATTACHED is visible the agent may signal,
        # and SIGUSR1's default action kills.
        previous = signal.signal(signal.SIGUSR1, _on_sigusr1)
        if previous is not _on_sigusr1:
            session.previous_handler = previous
        block = session.open_block()
        flags = FLAG_ATTACHED
        if block is not None and _register_stack_dump(session):
            flags |= FLAG_STACKS
        if block is not None and not block.fixed:
            session.leave_signals = LeaveSignals(block, os.environ.get("RANK", "?"))
            session.leave_signals.install()
        if block is not None:
            block.set_flags(session.local_rank, flags)
            if release_collectives:
                session.releaser = Releaser(block, os.environ.get("RANK", "?"))
                session.releaser.start()
        session.attached = True
    return session.block is not None


def _register_stack_dump(session: "_Session") -> bool:
    """Lets the agent ask for this process's Python stacks: faulthandler
    writes every thread's stack to ELASTICRUN_STACK_FILE from a C-level
    signal handler, so it works while the main thread is blocked inside a
    collective. True when registered."""
    path = os.environ.get(STACK_FILE_ENV)
    signum = os.environ.get(STACK_SIGNAL_ENV)
    if not path or not signum:
        return False
    try:
        session.stack_file = open(path, "a", buffering=1)
        faulthandler.register(int(signum), file=session.stack_file, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        # The agent then falls back to py-spy, or reports no stack.
        return False
    return True


def step(n: int, loss: Optional[float] = None, tokens_per_s: Optional[float] = None) -> None:
    """Publishes that this rank finished step n (into the mapped block; no
    system call). Metrics left as None keep the last reported values. A
    loss that is NaN or infinite is flagged, for the rest of the attempt:
    the agent's non-finite-loss monitor acts on it. The time the last compute() block took goes with
    the step."""
    session = _get()
    session.last_step = n
    block = session.open_block()
    if block is None:
        session.compute_s = None
        return
    flags = None
    if loss is not None:
        loss = float(loss)
        if not math.isfinite(loss):
            # Sticky: the agent samples the slot, and the next step's finite
            # loss must not hide this one.
            flags = block.read_slot(session.local_rank).flags | FLAG_LOSS_NONFINITE
    compute_us = None
    if session.compute_s is not None:
        compute_us = max(1, int(session.compute_s * 1e6))
        session.compute_s = None
    block.write_slot(session.local_rank, n, loss, tokens_per_s, flags=flags, compute_us=compute_us)


@contextlib.contextmanager
def compute() -> Iterator[None]:
    """Times the block (the step's own work, without waiting for peers): the
    next step() publishes it, and the agents compare it across nodes to
    find a straggler. Wall time: on a GPU, end the block with a
    synchronisation (e.g. the loss's .item()) so that it counts the
    kernels, not their launch."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _get().compute_s = time.perf_counter() - start


@contextlib.contextmanager
def section(name: str, timeout: Optional[float] = None) -> Iterator[None]:
    """Marks a long stretch that is not a hang (evaluation, a checkpoint
    save): the agent's hang monitor expects no step until it ends. With
    timeout (seconds), a section that lasts longer is a hang itself;
    without, the section is never one. Mark it on every rank that waits
    in it (ranks blocked in a barrier while rank 0 evaluates make no
    progress either). Sections nest; the innermost is the one shown."""
    session = _get()
    limit = 0 if timeout is None else max(1, int(math.ceil(timeout)))
    block = session.open_block()
    session.sections.append((name, limit))
    if block is not None:
        block.set_section(session.local_rank, name, limit)
    try:
        yield
    finally:
        session.sections.pop()
        if block is not None:
            if session.sections:
                outer, outer_limit = session.sections[-1]
                block.set_section(session.local_rank, outer, outer_limit)
            else:
                block.set_section(session.local_rank, None)


def process_group_timeout(default=None):
    """A datetime.timedelta for init_process_group(timeout=...) that follows
    the agent's fixed hang limit (--hang-timeout SECONDS): a collective that
    waits longer raises instead of waiting for the backend's default (gloo:
    30 minutes, NCCL: 10). `default` (None: the backend's own) when the
    limit is automatic, off, or there is no agent."""
    import datetime

    seconds = os.environ.get("ELASTICRUN_HANG_TIMEOUT")
    if not seconds or not seconds.isdigit():
        return default
    return datetime.timedelta(seconds=int(seconds))


def signal_received() -> bool:
    """Whether this process received SIGUSR1 since attach()."""
    return _get().signalled


def elastic_event_detected(step: Optional[int] = None) -> bool:
    """True when this rank should stop now: an event is pending, its stop
    step is agreed, and step (default: the last one given to step()) has
    reached it. A rank that never gave a step stops on the event's SIGUSR1
    (all ranks agreeing on it under HYPERPOD_SIGNAL_COORDINATION=distributed,
    as hyperpodrun's scripts expect). Without a control file, see the
    module docstring."""
    session = _get()
    block = session.open_block()
    current = session.last_step if step is None else step
    if block is not None and not block.fixed and current is not None:
        event = block.event()
        if not event.pending or event.stop_step < 0:
            return False
        return current >= event.stop_step
    if block is not None and not block.fixed:
        # A script that tells no step (hyperpodrun's contract, as in
        # hyperpod_elastic_agent's scripts): the scale event's SIGUSR1 is
        # the event, agreed across ranks as hyperpodrun agrees it.
        return _signalled(session)
    if os.environ.get(COORDINATION_ENV) == "distributed":
        return _all_ranks_max(session.signalled)
    return False


def _signalled(session: "_Session") -> bool:
    """Whether this rank received SIGUSR1; with
    HYPERPOD_SIGNAL_COORDINATION=distributed, whether any rank did."""
    if os.environ.get(COORDINATION_ENV) == "distributed":
        return _all_ranks_max(session.signalled)
    return session.signalled


def _all_ranks_max(flag: bool) -> bool:
    """MAX of flag over the default process group; the local flag when there
    is no initialised group (a single process has nobody to agree with)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    backend = str(dist.get_backend())
    # NCCL reduces only CUDA tensors; gloo (and "cpu:gloo,cuda:nccl") takes CPU ones.
    device = "cpu"
    if "nccl" in backend and "gloo" not in backend:
        device = f"cuda:{torch.cuda.current_device()}"
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def info() -> dict:
    """What this worker knows of the agent's event (None values without a
    control file)."""
    session = _get()
    block = session.open_block()
    env = os.environ
    out = {
        "rank": int(env["RANK"]) if "RANK" in env else None,
        "world_size": int(env["WORLD_SIZE"]) if "WORLD_SIZE" in env else None,
        "restart_count": int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "control_file": session.control_file,
        "local_rank": session.local_rank,
        "attached": session.attached,
        "signal_received": session.signalled,
        "last_step": session.last_step,
        "generation": None,
        "event_seq": None,
        "event_kind": None,
        "stop_step": None,
        "next_world_size": None,
        "deadline_unix_ms": None,
        "reason": None,
    }
    if block is not None:
        event = block.event()
        out.update(
            generation=event.generation,
            event_seq=event.event_seq,
            event_kind=kind_name(event.kind),
            stop_step=event.stop_step,
            next_world_size=event.next_world_size,
            deadline_unix_ms=event.deadline_unix_ms,
            reason=event.reason,
        )
    return out


def heartbeat(step_number: int) -> None:
    """The health monitors' name for step(): this rank is alive at step_number."""
    step(step_number)


def report(loss: Optional[float] = None, tokens_per_s: Optional[float] = None) -> None:
    """Publishes metrics for the current step (the last one given to step())."""
    session = _get()
    step(session.last_step if session.last_step is not None else -1, loss, tokens_per_s)


def stopped() -> None:
    """Tells the agent this rank reached the stop step and is checkpointing."""
    session = _get()
    block = session.open_block()
    if block is not None:
        block.set_flags(session.local_rank, FLAG_STOPPED)


def saved() -> None:
    """Tells the agent this rank's checkpoint shard is written."""
    session = _get()
    block = session.open_block()
    if block is not None:
        block.set_flags(session.local_rank, FLAG_SAVED)
