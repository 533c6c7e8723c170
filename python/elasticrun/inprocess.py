"""In-process recovery: workers that outlive their round.

Under `elasticrun --inprocess-restart`, a worker that trains through run()
does not exit when the job is resized or a peer fails. It leaves the round
(its process group is torn down), parks, and waits for the agent to hand it
the next round's place; then it joins the new process group, takes the
training state from a peer where it holds none, and calls the training
function again. Only the processes that must start, start: a joining
node's workers, and one whose process died. No interpreter start, no
`import torch`, no CUDA context, no checkpoint read from disk.

    import elasticrun
    from elasticrun.inprocess import State, run

    state = State(model=model, optimizer=opt, sampler=sampler, step=0)

    def train(world):                    # once per round
        ddp = DDP(state.model)           # over this round's process group
        state.sampler.set_world(world.rank, world.size, plan_batches(...))
        while state.step < total:
            ...one step...
            state.step += 1
            elasticrun.step(state.step)
            if elasticrun.elastic_event_detected():
                return                   # the job is resized: run() calls again

    run(train, state, backend="gloo")

The training function is re-entered with a new World every round; it
returns when it is done (run() returns what it returned) or when
elastic_event_detected() says the round stops. A collective that fails
because the round ended by a failure (the SDK's releaser makes it raise at
once) ends the call too: run() catches it, waits for the next round, and
calls again from the state in memory, which is the last whole step (a
failed collective leaves no rank with a half-applied update, as long as the
function updates `state` only after the step's collectives).

The state. State holds what training needs to continue: objects with
state_dict() and load_state_dict() (modules, optimizers, schedulers, the
elastic sampler) and plain values (the step). `step` is required. At the
start of each round, when some ranks hold state and others do not (a
joining node, a restarted process), the state of the holder with the
highest step (lowest rank on ties) goes to every rank: a module's tensors
by broadcast in place, bit for bit, the rest as one pickled object. A round
in which every rank is new (the job's start) sends nothing.

Without the flag, under torchrun, or without an agent, run() initialises
the process group once and calls the function once: the same script trains
at a fixed size. A worker whose process dies restarts as a process under
any launcher; with the flag it then receives the state from a survivor.
"""

from __future__ import annotations

import json
import os
import sys
import time
import weakref
from typing import Any, Callable, NamedTuple, Optional

from . import _get, _register_stack_dump, _release, attach, elastic_event_detected
from ._control import (
    FLAG_INPROCESS,
    FLAG_PARKED,
    FLAG_SAVED,
    FLAG_STOPPED,
    ControlBlock,
    EventKind,
)

ASSIGNMENT_VERSION = 1
# How often a parked worker looks at the control block.
PARK_POLL_S = 0.002
# How long a worker whose collective failed waits for the agent to say the
# round ended (a lost peer on another node takes its heartbeat timeout to
# be noticed); if nothing comes, the error was the function's own.
VERDICT_WAIT_S = 30.0
# How long the next round's assignment may stay unreadable once announced.
ASSIGNMENT_PATIENCE_S = 2.0


class World(NamedTuple):
    """Where this process trains in the current round."""

    rank: int
    size: int
    local_rank: int
    generation: int  # the rendezvous round (0 outside elasticrun)
    restart_count: int
    rounds: int  # rounds this process has trained in, this one included
    received: bool  # its state came from a peer at this round's start
    # When this round began for this process (time.time(): run() called, or
    # its park ended with the next assignment), its process group was up,
    # and the state was shared: what a benchmark splits a re-formation by.
    t_round: float = 0.0
    t_pg: float = 0.0
    t_state: float = 0.0


class State:
    """The training state a worker keeps across rounds: attributes given as
    keywords, read and assigned as attributes (state.step += 1)."""

    def __init__(self, step: int = 0, **items: Any) -> None:
        object.__setattr__(self, "_names", ["step", *sorted(items)])
        object.__setattr__(self, "held", False)  # trained state, not just initial
        self.step = step
        for name, value in items.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._names and name != "held":
            self._names.append(name)
        object.__setattr__(self, name, value)

    def names(self) -> list[str]:
        return list(self._names)


# Objects that hold something of a round (a process group of their own, a
# collective in flight) and must let it go before the round's process group
# is torn down: weak references to bound methods, called with failed=True
# when the round ended by a failure.
_round_end: list[weakref.WeakMethod] = []


def at_round_end(method: Callable[[bool], None]) -> None:
    """Registers a bound method that run() calls, with whether the round
    failed, when this process leaves a round in process (before its process
    group goes). CheckpointManager registers itself: a save in flight
    finishes first after a resize, and is given up after a failure. The
    object is not kept alive by this."""
    _round_end.append(weakref.WeakMethod(method))


def _end_round(dist, failed: bool) -> None:
    for ref in list(_round_end):
        method = ref()
        if method is None:
            _round_end.remove(ref)
            continue
        try:
            method(failed)
        except Exception as e:  # one holder's trouble does not keep the round
            print(f"elasticrun: at the round's end: {type(e).__name__}: {e}", file=sys.stderr,
                  flush=True)
    _leave_round(dist)


def read_assignment(control_file: str, generation: int, local_rank: int) -> dict[str, str]:
    """Local rank `local_rank`'s environment for round `generation`, from the
    agent's assignment file beside the control block (docs/protocol.md,
    "In-process re-formation"). Raises ValueError when the file is not for
    that round or not a version this SDK reads."""
    path = control_file + ".assign"
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("version") != ASSIGNMENT_VERSION:
        raise ValueError(f"{path}: version {doc.get('version')!r}, this SDK reads "
                         f"{ASSIGNMENT_VERSION}")
    if doc.get("generation") != generation:
        raise ValueError(f"{path}: round {doc.get('generation')!r}, expected {generation}")
    ranks = doc.get("ranks")
    if (not isinstance(ranks, list) or not 0 <= local_rank < len(ranks)
            or not isinstance(ranks[local_rank], dict)):
        raise ValueError(f"{path}: no entry for local rank {local_rank}")
    return {str(k): str(v) for k, v in ranks[local_rank].items()}


def run(fn: Callable[[World], Any], state: State, *, backend: Optional[str] = None,
        timeout=None) -> Any:
    """Calls fn(world) once per round the process trains in; returns what
    the last call returned. backend and timeout go to init_process_group
    (backend None: NCCL with CUDA, else gloo). See the module's docstring."""
    import torch
    import torch.distributed as dist

    attach()
    session = _get()
    block = session.block
    reforms = block is not None and block.inprocess and not block.fixed
    if reforms:
        block.set_flags(session.local_rank, FLAG_INPROCESS)
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    rounds = 0
    while True:
        t_round = time.time()
        env = os.environ
        generation = int(env.get("ELASTICRUN_GENERATION", "0"))
        kwargs = {"timeout": timeout} if timeout is not None else {}
        # A round that ends while this process joins it (a peer that never
        # comes, a failure): the releaser breaks the wait, and the process
        # waits for the next round as from a failed collective.
        error = None
        if reforms:
            _release.joining.begin(generation)  # _park() began it, once it had the assignment
        try:
            if reforms and _ended(block, generation):
                raise RuntimeError("the round failed before this process joined it")
            dist.init_process_group(backend, **kwargs)
            t_pg = time.time()
            received = _share_state(state, dist)
        except Exception as e:
            error = e
        finally:
            _release.joining.end()
        if error is not None:
            if not reforms or not _round_failed(block, generation, error):
                raise error
            print(f"elasticrun: the round ended while this process joined it "
                  f"({type(error).__name__}: {str(error)[:160]}); waiting for the next one",
                  file=sys.stderr, flush=True)
            _end_round(dist, failed=True)
            _park(block, session, generation)
            continue
        rounds += 1
        state.held = True
        world = World(rank=dist.get_rank(), size=dist.get_world_size(),
                      local_rank=session.local_rank, generation=generation,
                      restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
                      rounds=rounds, received=received, t_round=t_round, t_pg=t_pg,
                      t_state=time.time())
        try:
            result = fn(world)
        except Exception as e:
            if not reforms or not _round_failed(block, world.generation, e):
                raise
            print(f"elasticrun: rank {world.rank}: the round ended ({type(e).__name__}: "
                  f"{str(e)[:160]}); waiting for the next one", file=sys.stderr, flush=True)
            _end_round(dist, failed=True)
            _park(block, session, world.generation)
            continue
        if reforms and elastic_event_detected():
            _end_round(dist, failed=False)
            _park(block, session, world.generation)
            continue
        return result


def _share_state(state: State, dist) -> bool:
    """Sends the state of the best holder to every rank (module docstring);
    True when this rank received it."""
    world = dist.get_world_size()
    if world == 1:
        return False
    mine = [state.held, int(state.step)]
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    holders = [(step, -rank) for rank, (held, step) in enumerate(everyone) if held]
    if not holders:
        return False
    _, neg = max(holders)
    source = -neg
    me = dist.get_rank()
    if me != source and (not mine[0] or mine[1] < everyone[source][1]):
        # Behind (a hot spare's older step): it holds nothing until the whole
        # of the source's state is here. A rank at the source's step holds
        # the same state already: what it receives changes nothing.
        state.held = False
    # Every rank that holds the source's step already is equal to it (the
    # ranks of one round apply the same updates), but ranks cannot tell
    # equal from merely at the same step without sending: send to all.
    import torch

    modules = [n for n in state.names() if isinstance(getattr(state, n), torch.nn.Module)]
    for name in modules:
        for tensor in getattr(state, name).state_dict().values():
            dist.broadcast(tensor, src=source)
    rest = [n for n in state.names() if n not in modules]
    box = [None]
    if me == source:
        box = [{n: _save(getattr(state, n)) for n in rest}]
    dist.broadcast_object_list(box, src=source)
    if me != source:
        for name, value in box[0].items():
            _load(state, name, value)
    # Received: this rank held nothing, or an older step (a hot spare's).
    return me != source and (not mine[0] or mine[1] < everyone[source][1])


def _save(value: Any) -> Any:
    return ("state_dict", value.state_dict()) if hasattr(value, "state_dict") else ("value", value)


def _load(state: State, name: str, saved: Any) -> None:
    how, value = saved
    current = getattr(state, name, None)
    if how == "state_dict" and current is not None and hasattr(current, "load_state_dict"):
        current.load_state_dict(value)
    else:
        setattr(state, name, value)


def _round_failed(block: ControlBlock, generation: int, error: Exception) -> bool:
    """Whether `error` came from the end of this round (a failure here or on
    another node): the agent published an event for it, now or within
    VERDICT_WAIT_S when the error looks like a broken collective."""
    if _ended(block, generation):
        return True
    text = f"{type(error).__name__} {error}"
    if not any(w in text for w in ("DistError", "DistBackendError", "gloo", "NCCL", "Connection",
                                   "Timed out", "timed out")):
        return False
    deadline = time.monotonic() + VERDICT_WAIT_S
    while time.monotonic() < deadline:
        if _ended(block, generation):
            return True
        time.sleep(0.01)
    return False


def _ended(block: ControlBlock, generation: int) -> bool:
    """The round ended by a failure (here or elsewhere): not a resize,
    whose ranks stop at an agreed step with their collectives intact."""
    _, event = block.snapshot_event()
    return event.generation == generation and _release.failed(event)


def _leave_round(dist) -> None:
    """Tears the round's process group down (aborting NCCL's: a collective
    may still be stuck in it)."""
    if not dist.is_initialized():
        return
    try:
        if "nccl" in str(dist.get_backend()):
            from torch.distributed import distributed_c10d as c10d

            c10d._abort_process_group()
        dist.destroy_process_group()
    except Exception as e:  # a broken group: what is left goes with the process later
        print(f"elasticrun: tearing down the process group: {e}", file=sys.stderr, flush=True)


def _park(block: ControlBlock, session, generation: int) -> None:
    """Waits for the next round's assignment and takes it into the
    environment; exits the process when the agent dismisses it."""
    lr = session.local_rank
    block.set_flags(lr, FLAG_PARKED)
    unreadable = 0
    while True:
        _, event = block.snapshot_event()
        if event.kind == EventKind.REFORM and event.generation > generation:
            try:
                env = read_assignment(session.control_file, event.generation, lr)
            except (OSError, ValueError) as e:
                # Replaced between our two looks: look again; but a file that
                # stays unreadable is an error (the agent starts a new process).
                unreadable += 1
                if unreadable * PARK_POLL_S > ASSIGNMENT_PATIENCE_S:
                    raise RuntimeError(f"the next round's assignment cannot be read: {e}") from e
                time.sleep(PARK_POLL_S)
                continue
            # From here a round that fails is released by what the join opens.
            _release.joining.begin(event.generation)
            os.environ.update(env)
            break
        if event.kind == EventKind.SHUTDOWN and event.stop_step < 0 and event.generation >= generation:
            # The node leaves, or the job is over: nothing here is unsaved
            # that a round would want.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        time.sleep(PARK_POLL_S)
    # The new attempt's stacks file (the agent reads that one at a fault).
    if session.stack_file is not None:
        session.stack_file.close()
        session.stack_file = None
    _register_stack_dump(session)
    block.set_flags(lr, 0, FLAG_PARKED | FLAG_STOPPED | FLAG_SAVED)
