"""The node's memory tier, as a worker sees it.

Under elasticrun each agent owns a directory in shared memory (tmpfs) and
names it in ELASTICRUN_MEMORY_DIR: what a worker writes there outlives the
worker, because the agent holds it, and goes with the agent. A snapshot is
one rank's whole state at one step, a DCP checkpoint written without any
collective (``no_dist``), or for a state that is not sharded the tier's own
raw layout (below): ``step_<step, 9 digits>.r<rank>``, written as
``<name>.partial`` and published by a rename, so a worker killed mid-write
leaves nothing that loads. A state that is not sharded is every rank's, so
one rank per node writes it and any rank's snapshot of a step restores it;
a sharded one (FSDP, DTensor) is written by every rank as
``step_<step>.r<rank>of<world>``, and a step restores only from all
``world`` of them: their metadata are merged into one checkpoint that DCP
reads at any world size (resharding). The agent lists the node's snapshots in the
job's store when its workers are gone, and before the next round's
workers start it fetches the job's newest one from a peer when this node
lacks it (docs/memory-tier.md), checking every file's CRC32C against the
holder's manifest. So a worker that restarts finds the state in its own
node's memory, and a node that replaces a lost one finds it there too.

ELASTICRUN_MEMORY_LIMIT caps the bytes of the tier (the agent's
--memory-tier-limit): a snapshot that would not fit beside the one kept
is refused with an error at the save that tries it, not an OOM kill later.

CheckpointManager (checkpoint.py) writes and reads the tier; this module
only knows its names, its layouts and its budget.

The raw layout of a whole state: ``tensors.bin``, every tensor's bytes one
after the other, and ``.metadata`` (written last: the agent takes a
snapshot with one as published), a pickle of ``{"format":
"elasticrun-memory-raw-1", "items": [(path, "tensor", (dtype, shape,
offset, nbytes)) or (path, "value", value)]}``, a path being the keys from
the state dict's root. A restore maps the file and copies each tensor into
the state's own in place: the kernel copies the file's bytes straight into
the tensors' memory, where DCP's reader deserialises every tensor first
(bench/memory_bench.py).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

MEMORY_DIR_ENV = "ELASTICRUN_MEMORY_DIR"
MEMORY_LIMIT_ENV = "ELASTICRUN_MEMORY_LIMIT"
# Set (to r >= 1) when the agent replicates sharded state to r peers: it
# removes a rank's older shards itself, once the newer step is on r + 1
# nodes, so prune() leaves them.
MEMORY_REPLICAS_ENV = "ELASTICRUN_MEMORY_REPLICAS"
# The one format of a snapshot's name; the agent's parser is
# src/memory/snapshot.cpp.
_SNAPSHOT = re.compile(r"^step_(\d{9})\.r(\d+)(?:of(\d+))?$")
_PARTIAL = ".partial"


def snapshot_name(step: int, rank: int, world: Optional[int] = None) -> str:
    """world: the ranks of a sharded state's save; None: not sharded."""
    return f"step_{step:09d}.r{rank}" + (f"of{world}" if world is not None else "")


def parse_name(name: str) -> Optional[tuple[int, int, Optional[int]]]:
    """(step, rank, world or None) of a snapshot's name; None for anything else."""
    m = _SNAPSHOT.match(name)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None


def step_of(name: str) -> Optional[int]:
    """The step of a snapshot's name; None for anything else."""
    parsed = parse_name(name)
    return parsed[0] if parsed else None


def state_bytes(state: Any) -> int:
    """The bytes of the tensors in a state dict (what a snapshot's files hold,
    less DCP's metadata)."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


class MemoryTier:
    def __init__(self, root: Path, limit: Optional[int] = None,
                 pruned_by_agent: bool = False) -> None:
        self.root = Path(root)
        self.limit = limit
        self.pruned_by_agent = pruned_by_agent

    @classmethod
    def from_env(cls) -> Optional["MemoryTier"]:
        """The agent's tier, or None outside elasticrun (or with it off)."""
        root = os.environ.get(MEMORY_DIR_ENV)
        if not root:
            return None
        limit = os.environ.get(MEMORY_LIMIT_ENV)
        replicas = int(os.environ.get(MEMORY_REPLICAS_ENV) or 0)
        return cls(Path(root), int(limit) if limit else None, pruned_by_agent=replicas > 0)

    def snapshots(self) -> list[Path]:
        """Published snapshots, oldest step first (rank breaks ties)."""
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return []
        found = [p for p in entries if _SNAPSHOT.match(p.name) and (p / ".metadata").is_file()]
        return sorted(found, key=lambda p: (step_of(p.name), p.name))

    def newest(self) -> Optional[Path]:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def newest_step(self) -> int:
        """The step of the newest snapshot; 0 for none."""
        newest = self.newest()
        return step_of(newest.name) if newest is not None else 0

    def complete_steps(self) -> set[int]:
        """The steps this node can restore from alone: those of a snapshot
        that is not sharded, and those of which it holds every rank's."""
        whole: set[int] = set()
        shards: dict[tuple[int, int], set[int]] = {}
        for p in self.snapshots():
            step, rank, world = parse_name(p.name)
            if world is None:
                whole.add(step)
            else:
                shards.setdefault((step, world), set()).add(rank)
        whole |= {step for (step, world), ranks in shards.items() if ranks == set(range(world))}
        return whole

    def check_budget(self, nbytes: int) -> None:
        """Raises when a snapshot of `nbytes` cannot be written beside what
        the tier holds now (the snapshots it supersedes go only once it is
        written)."""
        if self.limit is None:
            return
        held = sum(_tree_bytes(p) for p in self.snapshots())
        if nbytes + held > self.limit:
            raise RuntimeError(
                f"elasticrun: the memory tier holds at most {self.limit} bytes "
                f"(--memory-tier-limit), and a snapshot of this state takes {nbytes} bytes beside "
                f"the {held} bytes it holds ({self.root}); raise the limit or save to a "
                f"checkpoint directory instead")

    def write(self, step: int, rank: int, state: dict, world: Optional[int] = None) -> Path:
        """Writes `state` (a DCP state dict, on CPU or not) as rank `rank`'s
        snapshot of `step` (of a sharded state saved by `world` ranks) and
        publishes it. A whole state's older snapshots go at once; a sharded
        one's older shards stay until prune() (only once every rank has
        written its own is the new set whole). No collective."""
        import warnings

        import torch.distributed.checkpoint as dcp

        self.check_budget(state_bytes(state))
        name = snapshot_name(step, rank, world)
        final, partial = self.root / name, self.root / (name + _PARTIAL)
        shutil.rmtree(partial, ignore_errors=True)
        if world is None:
            _write_raw(partial, state)
        else:
            with warnings.catch_warnings():
                # "assuming the intent is to save in a single process": it is.
                warnings.filterwarnings("ignore", message=".*single process",
                                        category=UserWarning)
                dcp.save(state, checkpoint_id=partial, no_dist=True)
        shutil.rmtree(final, ignore_errors=True)  # the same step again (a repeated step)
        os.replace(partial, final)
        if world is None:
            for old in self.snapshots():
                if step_of(old.name) < step:
                    shutil.rmtree(old, ignore_errors=True)
        return final

    def prune(self, step: int, rank: int, world: int) -> None:
        """Removes rank `rank`'s shards older than `step`: call it once every
        rank of the save has written its shards of `step`. Under replication
        the agent does it, once `step` is replicated too: a node lost before
        then needs the older step of every rank."""
        if self.pruned_by_agent:
            return
        for old in self.snapshots():
            old_step, old_rank, old_world = parse_name(old.name)
            if old_step < step and (old_rank, old_world) == (rank, world):
                shutil.rmtree(old, ignore_errors=True)

    def load(self, step: int, state: dict) -> Path:
        """Fills `state` from this node's snapshots of `step`: any rank's of
        a state that is not sharded (it is every rank's), all ranks' of a
        sharded one, resharded for this world. Returns what it read; raises
        naming the step and the directory when this node cannot restore it."""
        import torch.distributed.checkpoint as dcp

        if step not in self.complete_steps():
            raise RuntimeError(
                f"elasticrun: the memory snapshots of step {step}, the one chosen for this "
                f"round, are not all on this node ({self.root}); its agent could not fetch "
                f"them from any peer (see the agent's log)")
        held = [p for p in self.snapshots() if step_of(p.name) == step]
        whole = [p for p in held if parse_name(p.name)[2] is None]
        if whole:
            _load_raw(whole[0], state)
            return whole[0]
        merged = self._merge(step, held)
        try:
            dcp.load(state, checkpoint_id=merged, no_dist=True)
        finally:
            shutil.rmtree(merged, ignore_errors=True)
        return merged

    def _merge(self, step: int, held: list[Path]) -> Path:
        """One DCP checkpoint of every rank's shards of `step`: a directory
        whose .metadata names each chunk of every rank's snapshot (their
        files stay where they are). Removed by the caller."""
        import dataclasses
        import pickle

        from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

        world = parse_name(held[0].name)[2]
        parts = sorted((p for p in held if parse_name(p.name)[2] == world),
                       key=lambda p: parse_name(p.name)[1])
        items: dict[str, Any] = {}
        storage: dict[Any, Any] = {}
        for part in parts:
            with open(part / ".metadata", "rb") as f:
                md = pickle.load(f)
            for fqn, meta in md.state_dict_metadata.items():
                if not isinstance(meta, TensorStorageMetadata):
                    items.setdefault(fqn, meta)  # bytes: every rank wrote the same
                    continue
                have = items.setdefault(fqn, dataclasses.replace(meta, chunks=[]))
                # A replicated tensor's chunk is every rank's: keep one.
                known = {tuple(c.offsets) for c in have.chunks}
                have.chunks.extend(c for c in meta.chunks if tuple(c.offsets) not in known)
            for index, info in md.storage_data.items():
                storage.setdefault(index, dataclasses.replace(
                    info, relative_path=f"../{part.name}/{info.relative_path}"))
        merged = self.root / f".merged-{step:09d}-{os.getpid()}"
        shutil.rmtree(merged, ignore_errors=True)
        merged.mkdir()
        with open(merged / ".metadata", "wb") as f:
            pickle.dump(Metadata(state_dict_metadata=items, storage_data=storage), f)
        return merged


_RAW = "elasticrun-memory-raw-1"
_DATA = "tensors.bin"


def _leaves(value: Any, path: tuple = ()):
    """(path, leaf) of every value below dicts and lists, in order."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _write_raw(directory: Path, state: dict) -> None:
    import pickle

    import torch

    directory.mkdir()
    items, offset = [], 0
    with open(directory / _DATA, "wb") as f:
        for path, value in _leaves(state):
            if isinstance(value, torch.Tensor):
                t = value.detach().cpu().contiguous()
                nbytes = t.numel() * t.element_size()
                if nbytes:
                    f.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
                items.append((path, "tensor", (str(t.dtype).removeprefix("torch."),
                                               tuple(t.shape), offset, nbytes)))
                offset += nbytes
            else:
                items.append((path, "value", value))
    with open(directory / ".metadata", "wb") as f:
        pickle.dump({"format": _RAW, "items": items}, f)


def _load_raw(directory: Path, state: dict) -> None:
    """Fills `state`'s tensors in place and sets its other values, as
    dcp.load does; a tensor of `state` that the snapshot lacks, or holds at
    another shape, is an error naming it."""
    import pickle

    import torch

    with open(directory / ".metadata", "rb") as f:
        meta = pickle.load(f)
    if not isinstance(meta, dict) or meta.get("format") != _RAW:
        raise RuntimeError(f"elasticrun: {directory} is not a memory snapshot of this version")
    saved = {path: (kind, info) for path, kind, info in meta["items"]}
    with open(directory / _DATA, "rb", buffering=0) as f:
        for path, target in list(_leaves(state)):
            if path not in saved:
                if isinstance(target, torch.Tensor):
                    raise RuntimeError(f"elasticrun: the memory snapshot {directory.name} has "
                                       f"no {'.'.join(map(str, path))}")
                continue
            kind, info = saved[path]
            if kind == "value":
                parent = state
                for key in path[:-1]:
                    parent = parent[key]
                parent[path[-1]] = info
                continue
            if not isinstance(target, torch.Tensor):
                continue  # a tensor saved where the state now holds something else
            dtype, shape, offset, nbytes = info
            if tuple(target.shape) != tuple(shape) or str(target.dtype) != "torch." + dtype:
                raise RuntimeError(f"elasticrun: {'.'.join(map(str, path))} is {dtype} "
                                   f"{list(shape)} in the memory snapshot {directory.name}, "
                                   f"{str(target.dtype).removeprefix('torch.')} "
                                   f"{list(target.shape)} here")
            if nbytes:
                _read_into(f, offset, nbytes, target)


def _read_into(f, offset: int, nbytes: int, target) -> None:
    """The file's bytes [offset, offset + nbytes) into `target`: straight
    into its memory when it is a contiguous CPU tensor (one copy, by the
    kernel), through a buffer otherwise (a GPU tensor)."""
    import torch

    f.seek(offset)
    if target.device.type == "cpu" and target.is_contiguous():
        view = memoryview(target.detach().reshape(-1).view(torch.uint8).numpy())
    else:
        view = memoryview(bytearray(nbytes))
    done = 0
    while done < nbytes:
        n = f.readinto(view[done:])
        if not n:
            raise RuntimeError(f"elasticrun: {f.name} ends at {offset + done}, before "
                               f"{offset + nbytes}")
        done += n
    if not (target.device.type == "cpu" and target.is_contiguous()):
        with torch.no_grad():
            src = torch.frombuffer(view, dtype=torch.uint8).view(target.dtype).view(target.shape)
            target.copy_(src)


def restorable(tier: Optional[MemoryTier]) -> tuple[set[int], set[str]]:
    """The steps that every rank's node can restore from its tier, and the
    names of the snapshots any node holds: a collective (an all-gather) when
    there is a process group; nothing without a tier (then on every rank)."""
    import torch.distributed as dist

    if tier is None:
        return set(), set()
    mine = (sorted(tier.complete_steps()), [p.name for p in tier.snapshots()])
    every: list[Any] = [mine]
    if dist.is_initialized():
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
    return (set.intersection(*(set(steps) for steps, _ in every)),
            {name for _, names in every for name in names})


def why_lost(held: set[str]) -> str:
    """Why the memory snapshots `held` (the nodes' together) restore no step."""
    parsed = [parse_name(n) for n in held]
    step = max(step for step, _, _ in parsed)
    worlds = {world for s, _, world in parsed if s == step and world is not None}
    why = f"step {step} is not on every node (an agent could not fetch it: see its log)"
    for world in sorted(worlds):
        ranks = {rank for s, rank, w in parsed if s == step and w == world}
        if len(ranks) < world:
            missing = ", ".join(str(r) for r in sorted(set(range(world)) - ranks))
            why = (f"the shards of rank(s) {missing} of the {world} that saved step {step} are on "
                   f"no node: they were on nodes that are gone (each node's shards are on it and on "
                   f"--memory-replicas others: losing more nodes than that at once loses "
                   f"some)")
    return (f"elasticrun: the training state cannot be restored from the memory tier: {why}; "
            f"and there is no checkpoint directory to fall back to. Nothing was loaded, rather "
            f"than start again from step 0")


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
