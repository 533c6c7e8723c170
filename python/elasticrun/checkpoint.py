"""Sharded checkpoints that survive a change of world size.

Built on torch.distributed.checkpoint (DCP): every rank writes its shard, any
world size can load it back (DCP reshards), and the state dicts of the model
and optimizer come from torch.distributed.checkpoint.state_dict, which
handles DDP and FSDP wrappers.

Publication is atomic: a checkpoint is written to ``step_<n>.partial`` and
becomes ``step_<n>`` by a rename on rank 0 once every rank has written its
part; then ``latest`` (a small text file naming it) is replaced by a rename
too, and the directory is fsynced after each rename. A crash at any point
leaves ``latest`` naming a complete checkpoint (or none): a ``.partial``
directory is never loaded and the next save removes it. The newest ``keep``
checkpoints are retained.

Everything that must survive a resize goes in one call:

    ckpt = CheckpointManager("/shared/ckpt", keep=3)
    state = ckpt.load(model, optimizer, scheduler)   # None on the first run
    step = state["step"] if state else 0
    ...
    ckpt.save(step, model, optimizer, scheduler, extra={"sampler": sampler.state_dict()})

``extra`` holds JSON values (ints, floats, strings, lists, dicts): the data
position, RNG seeds; it is stored once per checkpoint, as rank 0 gives it. Every rank must call save() and load()
(they are collectives); the directory must be shared by all nodes.

save_async() takes the training loop's part of a save down to a copy of the
state: the writing, and the publication by rank 0, happen in a background
thread over a process group of their own while training goes on. One save
is in flight at a time; the next save of either kind, or wait(), waits for
it and raises its error:

    if step % 50 == 0:
        ckpt.save_async(step, model, optimizer, scheduler, extra={...})
    ...
    ckpt.save(step, ...)    # the last one: waits for the one in flight first

A rescue keeps the steps since the last checkpoint when a peer fails. When
every rank holds the whole state (DDP), any rank that outlives the failure
holds the state of the last step it completed; rescue() writes it, without
a collective, from a handler of the error the broken collective raised:

    try:
        for ...:
            train_step(); step += 1
    except Exception:
        ckpt.rescue(step, model, optimizer, scheduler, extra={...})
        raise

One rank per step writes it (they claim the step in the job's store; when
the store cannot be reached each writes its own), as ``rescue_<n>.r<rank>``,
published by a rename like a checkpoint. The next load() resumes from the
newest complete rescue newer than ``latest``: rank 0 publishes it as
``step_<n>``, so ``latest`` names it from then on. rescue() refuses sharded
state (FSDP, tensor parallelism): no single rank holds all of it.

Under elasticrun the node's memory tier (memory.py, docs/memory-tier.md)
comes first: every save, background or not, also writes the state into
shared memory that the node's agent holds (one rank per node writes it,
without a collective), and a rescue goes there instead of to the
directory, written by one rank of each node. load() takes the newest of
the memory tier and the directory, the memory tier at equal steps; a node
that lacks the job's newest snapshot (it replaces a lost one) has it
fetched from a peer by its agent before its workers start. With no
directory at all (``CheckpointManager(None)``) the memory tier is the only
one: a job without shared storage survives the loss of a node while one
node that holds the newest snapshot survives. A sharded state (FSDP) is
written by every rank, its own shards, and restores (resharded to any
world size) only from all of them: a lost node's shards are lost with it
(they are not replicated yet), and the directory serves then. rescue()
refuses sharded state as before.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import os
import re
import shutil
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any, Optional

from ._dist import barrier as _barrier
from ._dist import group_rank as _group_rank
from ._dist import rank as _rank
from ._dist import sharded_tensors as _sharded_tensors
from ._dist import world_size as _world_size
from ._durable import fsync_dir as _fsync_dir
from ._durable import stop_signals_deferred as _stop_signals_deferred
from ._durable import write_atomically as _write_atomically
from .memory import MemoryTier, restorable, why_lost

_STEP_DIR = re.compile(r"^step_(\d{9})$")
_RESCUE_DIR = re.compile(r"^rescue_(\d{9})\.r(\d+)$")
LATEST = "latest"
# DCP's file of the checkpoint's metadata: written last by every save.
_METADATA = ".metadata"
# How long a rescue waits for the job's store to answer its claim: the
# store may be on the node that failed.
_CLAIM_TIMEOUT = datetime.timedelta(seconds=2)


def _step_of(path: Optional[Path]) -> int:
    """The step of a checkpoint or rescue directory; 0 for none."""
    if path is None:
        return 0
    m = _STEP_DIR.match(path.name) or _RESCUE_DIR.match(path.name)
    return int(m.group(1))


# How long a background save given up at a failed round's end may take to
# notice that its connections were shut down.
_ABANDON_WAIT_S = 10.0


def memory_tier_available() -> bool:
    """Whether this process runs under an elasticrun agent that keeps a
    memory tier: then ``CheckpointManager(None)`` keeps the state there
    (outside elasticrun, or with ``--memory-tier-limit 0``, it is an error)."""
    return MemoryTier.from_env() is not None


class CheckpointManager:
    def __init__(self, root: Optional[str | os.PathLike], keep: int = 3,
                 memory: Optional[bool] = None):
        """root: the checkpoint directory shared by all nodes, or None to keep
        the state in the memory tier only. memory: whether saves go to the
        agent's memory tier too; None: when there is one (under elasticrun)."""
        if keep < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        self.root = Path(root) if root is not None else None
        self.keep = keep
        self.memory: Optional[MemoryTier] = MemoryTier.from_env() if memory is not False else None
        if memory and self.memory is None:
            raise RuntimeError("elasticrun: memory=True, but no memory tier: run under elasticrun "
                               "(which names it in ELASTICRUN_MEMORY_DIR)")
        if self.root is None and self.memory is None:
            raise RuntimeError("elasticrun: no checkpoint directory and no memory tier (there is "
                               "one only under elasticrun): nothing to save the state to")
        # Shared by the ranks of one set of workers (rank 0 draws it in
        # load()): the namespace of their rescue claims in the store.
        self._attempt: Optional[str] = None
        # Where the last load() found the state: "memory" (the tier),
        # "directory", or None (nothing to load, or no load yet).
        self.loaded_from: Optional[str] = None
        # save_async(): its thread, its process group (made on first use by
        # every rank, a collective) and the save in flight.
        self._writer: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._group = None
        self._group_sockets: set[int] = set()  # its connections (socket inodes)
        self._in_flight: Optional[concurrent.futures.Future] = None
        from .inprocess import at_round_end

        at_round_end(self._round_ended)

    # --- what is on disk

    def latest(self) -> Optional[Path]:
        """The published checkpoint `latest` names, or None."""
        if self.root is None:
            return None
        try:
            name = (self.root / LATEST).read_text().strip()
        except FileNotFoundError:
            return None
        if not _STEP_DIR.match(name) or not (self.root / name).is_dir():
            raise RuntimeError(f"{self.root / LATEST} names {name!r}, which is not a checkpoint")
        return self.root / name

    def published(self) -> list[Path]:
        """Published checkpoints, oldest first."""
        if self.root is None or not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _STEP_DIR.match(p.name) and p.is_dir())

    def rescues(self) -> list[Path]:
        """Complete rescues, oldest step first (see rescue())."""
        if self.root is None or not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir()
                 if _RESCUE_DIR.match(p.name) and (p / _METADATA).is_file()]
        return sorted(found, key=lambda p: (_step_of(p), p.name))

    # --- collectives

    def save(self, step: int, model, optimizer=None, scheduler=None,
             extra: Optional[dict[str, Any]] = None) -> Path:
        """Writes this rank's shard of step `step` and publishes the
        checkpoint once every rank has written; with the memory tier, writes
        this rank's snapshot of it first. Returns the checkpoint's directory
        (without one, this rank's snapshot, or None when another rank of its
        node writes the node's)."""
        import torch.distributed.checkpoint as dcp

        from . import section

        self.wait()
        rank = _group_rank()
        # For the agent: a save is no hang however long it takes, and its
        # length goes in the event log (a section named "ckpt").
        with section("ckpt"):
            state = self._state(model, optimizer, scheduler, extra, step)
            snapshot = self._snapshot(step, state)
            if self.root is None:
                _barrier()  # every node's snapshot is written when save() returns
                self._prune_shards(step, state)
                return snapshot
            final, partial = self._paths(step)
            if rank == 0:
                self.root.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(partial, ignore_errors=True)  # a crash of an earlier save
            _barrier()
            dcp.save(state, checkpoint_id=partial)
            _barrier()
            if rank == 0:
                self._publish(step)
                # No save is in flight on any rank (each waited for its own
                # before the first barrier): every other .partial is a crash's.
                for stale in self.root.glob("step_*.partial"):
                    shutil.rmtree(stale, ignore_errors=True)
            _barrier()
            self._prune_shards(step, state)
        return final

    def save_async(self, step: int, model, optimizer=None, scheduler=None,
                   extra: Optional[dict[str, Any]] = None) -> None:
        """save(), with the writing in the background: returns once this
        rank's state is copied (to CPU memory), and the copy is written and
        published, rank 0 publishing once every rank has written, while the
        caller trains on. Every rank calls it at the same step. It waits for
        the save in flight first, and raises that save's error."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        from . import section

        self.wait()
        rank = _group_rank()
        state = self._state(model, optimizer, scheduler, extra, step)
        to_memory, shards_of = self._writes_snapshot(state)
        if self.root is None and not to_memory:
            return  # another rank of this node writes its snapshot
        if self.root is not None:
            final, partial = self._paths(step)
            if rank == 0:
                self.root.mkdir(parents=True, exist_ok=True)
        # The directory's collectives, and a sharded snapshot's barrier
        # before its older shards go, run on a group of their own.
        group = self._async_group() if self.root is not None or shards_of else None
        # Every option off: a plain synchronous copy, so the optimizer's next
        # step cannot change what is written. The copy is the loop's part
        # (a section "ckpt" for the agent); the writing that follows runs
        # beside training and is no section.
        stager = DefaultStager(StagingOptions(False, False, False, False))
        try:
            with section("ckpt"):
                copy = stager.stage(state)
        finally:
            stager.close()

        def write() -> Path:
            snapshot = self.memory.write(step, _rank(), copy, shards_of) if to_memory else None
            if self.root is None:
                if shards_of:
                    import torch.distributed as dist

                    dist.barrier(group=group)  # every rank's shards are written
                    self.memory.prune(step, _rank(), shards_of)
                return snapshot
            # A .partial of this step left by a crash is written over: DCP
            # reads only the files its new .metadata names. Not removed
            # first: another rank may be writing into it already.
            dcp.save(copy, checkpoint_id=partial, process_group=group)
            if rank == 0:
                # Rank 0 coordinates DCP's save: its metadata goes last, once
                # every rank reported its files written.
                self._publish(step)
            if shards_of:
                # DCP's save finished on every rank: so did their snapshots.
                self.memory.prune(step, _rank(), shards_of)
            return final

        if self._writer is None:
            self._writer = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="elasticrun-checkpoint")
        self._in_flight = self._writer.submit(write)

    def wait(self) -> Optional[Path]:
        """Waits for the save_async() in flight, if any: its directory once
        published (rank 0's is published when this returns; another rank's
        may still be a moment from it), or None when none was in flight.
        Raises the save's error."""
        future, self._in_flight = self._in_flight, None
        return future.result() if future is not None else None

    def _writes_snapshot(self, state: dict) -> tuple[bool, Optional[int]]:
        """Whether this rank writes a memory snapshot of `state`, and the
        world size it is a shard of: every rank its own of a sharded state
        (None: not sharded); of one that is not, local rank 0 alone, as every
        rank holds all of it and one copy per node is enough."""
        if self.memory is None:
            return False, None
        if _sharded_tensors(state):
            return True, _world_size()
        return int(os.environ.get("LOCAL_RANK", "0")) == 0, None

    def _snapshot(self, step: int, state: dict) -> Optional[Path]:
        """save()'s part in the memory tier: this rank's snapshot of `step`,
        if it writes one. Returns it (None without the tier, or when another
        rank of this node writes it)."""
        writes, world = self._writes_snapshot(state)
        return self.memory.write(step, _rank(), state, world) if writes else None

    def _prune_shards(self, step: int, state: dict) -> None:
        """After a collective that every rank entered with its snapshot of
        `step` written: this rank's older shards go (a whole state's went as
        its snapshot was written)."""
        writes, world = self._writes_snapshot(state)
        if writes and world is not None:
            self.memory.prune(step, _rank(), world)

    def _paths(self, step: int) -> tuple[Path, Path]:
        name = f"step_{step:09d}"
        return self.root / name, self.root / (name + ".partial")

    def _publish(self, step: int) -> None:
        """Rank 0, once every rank wrote step `step`: renames it into place,
        points `latest` at it and removes what it supersedes."""
        final, partial = self._paths(step)
        _fsync_dir(partial)
        if final.exists():  # the same step saved again (a restart that repeated it)
            shutil.rmtree(final)
        os.replace(partial, final)
        _fsync_dir(self.root)
        _write_atomically(self.root / LATEST, final.name + "\n")
        for old in self.published()[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        # Older partials only: a later step's may be in the making (another
        # rank's next save_async) when this runs in the background.
        for stale in self.root.glob("step_*.partial"):
            m = _STEP_DIR.match(stale.name.removesuffix(".partial"))
            if m and int(m.group(1)) < step:
                shutil.rmtree(stale, ignore_errors=True)
        self._drop_rescues(up_to=step)

    def _round_ended(self, failed: bool) -> None:
        """elasticrun.inprocess: this process leaves its round, and the
        round's process groups go. After a resize every rank stops at the
        same step, so the save in flight finishes over them first; after a
        failure its collectives may wait on a dead peer: it is given up, its
        group's connections shut down so that they raise at once (rank 0
        publishes only what every rank wrote). The next round makes its own
        group."""
        from ._release import shutdown_sockets

        future, self._in_flight = self._in_flight, None
        if future is not None and not failed:
            try:
                future.result()
            except Exception as e:  # not published: the next save comes in the next round
                print(f"elasticrun: the checkpoint in flight at the round's end failed: {e}",
                      file=sys.stderr, flush=True)
        elif future is not None:
            shutdown_sockets(self._group_sockets)
            try:
                # Its collectives raise now: out of the group before the group goes.
                future.result(timeout=_ABANDON_WAIT_S)
            except Exception:  # noqa: BLE001 - its error is the round's; a timeout: leave it
                pass
            if not future.done():
                self._writer.shutdown(wait=False)
                self._writer = None
        self._group, self._group_sockets = None, set()
        self._attempt = None

    def _async_group(self):
        """The process group of save_async()'s collectives: a gloo group of
        its own, so that they run beside the training's without sharing its
        order (and on CPU under NCCL), with the default group's timeout."""
        import torch.distributed as dist

        if self._group is None and dist.is_initialized():
            timeout = None
            default = dist.distributed_c10d._get_default_group()
            for device in getattr(default, "_device_types", []):
                try:
                    timeout = default._get_backend(device).options._timeout
                    break
                except Exception:  # a backend without options: PyTorch's default
                    continue
            from ._release import socket_inodes

            before = socket_inodes()
            self._group = dist.new_group(backend="gloo", timeout=timeout)
            # gloo connects its full mesh as the group is made: these are its.
            self._group_sockets = socket_inodes() - before
        return self._group

    def load(self, model, optimizer=None, scheduler=None) -> Optional[dict[str, Any]]:
        """Loads the latest checkpoint into model/optimizer/scheduler, whatever
        the world size it was written at. Returns {"step": n, **extra}, or
        None when there is none."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        # Rank 0 alone reads the directory and decides (publishing a rescue
        # if there is a newer one); the others take its word, so every rank
        # loads the same checkpoint even where a shared file system shows
        # them the directory at different moments.
        # The memory tier's snapshot wins at equal steps: it is the faster
        # read. Only a step that every node holds a snapshot of will do (its
        # agent fetches the job's newest before the workers start, but a
        # static job's agents fetch nothing): the newest such step.
        steps, held = restorable(self.memory)
        choice: list[Any] = [None, None, None]
        if _group_rank() == 0:
            chosen = self._adopt_rescue() if self.root is not None else None
            if steps and max(steps) >= _step_of(chosen):
                # By step: each node holds its own rank's snapshot of it.
                choice = ["memory", max(steps), uuid.uuid4().hex]
            elif chosen is None and held:
                # Training happened, and its state cannot be put together:
                # an error, not a silent start from step 0.
                choice = ["lost", why_lost(held), None]
            else:
                choice = ["disk", chosen.name if chosen is not None else None, uuid.uuid4().hex]
        if dist.is_initialized():
            dist.broadcast_object_list(choice, src=0)
        tier, name, self._attempt = choice
        self.loaded_from = None
        if tier == "lost":
            raise RuntimeError(name)
        if name is None:
            return None
        self.loaded_from = "memory" if tier == "memory" else "directory"
        state = self._state(model, optimizer, scheduler, None, 0)
        if tier == "memory":
            self.memory.load(name, state)  # name: the step
        else:
            dcp.load(state, checkpoint_id=self.root / name)
        set_state_dict(model, optimizer if optimizer is not None else [],
                       model_state_dict=state["model"],
                       optim_state_dict=state.get("optim", {}))
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        out = json.loads(state["extra"])
        out["step"] = int(state["step"])
        return out

    def rescue(self, step: int, model, optimizer=None, scheduler=None,
               extra: Optional[dict[str, Any]] = None) -> Optional[Path]:
        """Writes this rank's state of step `step` without any collective,
        for the next load() to resume from: call it when a collective failed
        because a peer is gone, with the step the state has completed. The
        state must be the same on every rank (DDP, or no wrapper); sharded
        state (FSDP, DTensor) is refused. Returns the rescue's directory, or
        None when nothing was written: the step is not newer than the
        latest checkpoint, the state is sharded, or another rank claimed
        the step. SIGTERM and SIGINT wait until it returns. With the memory
        tier the rescue goes there, one rank of each node writing it."""
        import torch.distributed.checkpoint as dcp

        rank = _rank()
        try:
            newest = _step_of(self.latest())
        except RuntimeError:
            newest = 0
        if self.memory is not None:
            newest = max(newest, self.memory.newest_step())
        if step <= newest:
            return None
        state = self._state(model, optimizer, scheduler, extra, step)
        sharded = _sharded_tensors(state)
        if sharded:
            print(f"elasticrun.checkpoint: rank {rank}: no rescue of step {step}: the state is "
                  f"sharded ({sharded[0]} holds only this rank's part); the job resumes from "
                  f"its latest checkpoint", file=sys.stderr, flush=True)
            return None
        # Under elasticrun: the agent spares a rank that is saving a rescue
        # the stop signal it sends after a failure (docs/ARCHITECTURE.md).
        import elasticrun

        elasticrun.stopped()
        if not self._claim(step, rank):
            return None
        if self.memory is not None:
            with _stop_signals_deferred():
                final = self.memory.write(step, rank, state)
            elasticrun.saved()
            print(f"elasticrun.checkpoint: rank {rank}: rescued step {step} to the memory tier "
                  f"({final})", file=sys.stderr, flush=True)
            return final
        name = f"rescue_{step:09d}.r{rank}"
        final, partial = self.root / name, self.root / (name + ".partial")
        with _stop_signals_deferred():
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)
            with warnings.catch_warnings():
                # "assuming the intent is to save in a single process": it is.
                warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
                dcp.save(state, checkpoint_id=partial, no_dist=True)
            _fsync_dir(partial)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(partial, final)
            _fsync_dir(self.root)
        elasticrun.saved()
        print(f"elasticrun.checkpoint: rank {rank}: rescued step {step} to {final}",
              file=sys.stderr, flush=True)
        return final

    def _claim(self, step: int, rank: int) -> bool:
        """Whether this rank writes the rescue of `step`: the first of this set
        of workers to claim it in the job's store does (of this node's, with
        the memory tier: each node keeps its own). Without an answer from
        the store every rank writes its own, which costs space, never the
        rescue."""
        if self._attempt is None:
            return True
        try:
            import torch.distributed.distributed_c10d as c10d

            store = c10d._get_default_store()
        except Exception:  # no process group, or a PyTorch without it
            return True
        key = f"elasticrun/rescue/{self._attempt}/{step}"
        if self.memory is not None:
            key += f"/node{os.environ.get('GROUP_RANK', '0')}"
        try:
            previous = store.timeout
            store.set_timeout(_CLAIM_TIMEOUT)
            try:
                return store.add(key, 1) == 1
            finally:
                store.set_timeout(previous)
        except Exception as e:  # the store's host may be the one that failed
            print(f"elasticrun.checkpoint: rank {rank}: the store did not answer the claim "
                  f"of step {step} ({e}); writing a rescue of its own", file=sys.stderr, flush=True)
            return True

    def _adopt_rescue(self) -> Optional[Path]:
        """The checkpoint to load: `latest`, or the newest complete rescue when
        it is newer, which is published as step_<n> first. Rank 0 only."""
        latest = self.latest()
        rescues = [p for p in self.rescues() if _step_of(p) > _step_of(latest)]
        if not rescues:
            return latest
        best = rescues[-1]
        step = _step_of(best)
        final = self.root / f"step_{step:09d}"
        if final.exists():  # published, and `latest` not yet moved to it
            shutil.rmtree(best)
        else:
            os.replace(best, final)
        _fsync_dir(self.root)
        _write_atomically(self.root / LATEST, final.name + "\n")
        for old in self.published()[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        # No rescue is being written now (the workers of the last attempt
        # are gone): any half-written one is a crash's.
        self._drop_rescues(up_to=step, half_written=True)
        return final

    def _drop_rescues(self, up_to: int, half_written: bool = False) -> None:
        """Removes the rescues, whole or half-written, that a checkpoint of
        step `up_to` supersedes, and with `half_written` any half-written
        one (a rescue of a later step may be in the making otherwise)."""
        if not self.root.is_dir():
            return
        for p in self.root.iterdir():
            m = _RESCUE_DIR.match(p.name.removesuffix(".partial"))
            if m and ((half_written and p.name.endswith(".partial")) or int(m.group(1)) <= up_to):
                shutil.rmtree(p, ignore_errors=True)

    @staticmethod
    def _state(model, optimizer, scheduler, extra, step) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer if optimizer is not None else [])
        # extra goes in as one JSON string: DCP flattens nested dicts into
        # keys, and a load only fills the keys its template has.
        state: dict[str, Any] = {"model": model_sd, "step": step,
                                 "extra": json.dumps(extra or {}, sort_keys=True)}
        if optimizer is not None:
            state["optim"] = optim_sd
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        return state

