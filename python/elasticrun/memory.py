"""The node's memory tier, as a worker sees it.

Under elasticrun each agent owns a directory in shared memory (tmpfs) and
names it in ELASTICRUN_MEMORY_DIR: what a worker writes there outlives the
worker, because the agent holds it, and goes with the agent. A snapshot is
one rank's whole state at one step, a DCP checkpoint written without any
collective (``no_dist``): ``step_<step, 9 digits>.r<rank>``, written as
``<name>.partial`` and published by a rename, so a worker killed mid-write
leaves nothing that loads. The agent lists the node's snapshots in the
job's store when its workers are gone, and before the next round's
workers start it fetches the job's newest one from a peer when this node
lacks it (docs/memory-tier.md), checking every file's CRC32C against the
holder's manifest. So a worker that restarts finds the state in its own
node's memory, and a node that replaces a lost one finds it there too.

ELASTICRUN_MEMORY_LIMIT caps the bytes of the tier (the agent's
--memory-tier-limit): a snapshot that would not fit beside the one kept
is refused with an error at the save that tries it, not an OOM kill later.

CheckpointManager (checkpoint.py) writes and reads the tier; this module
only knows its names and its budget.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

MEMORY_DIR_ENV = "ELASTICRUN_MEMORY_DIR"
MEMORY_LIMIT_ENV = "ELASTICRUN_MEMORY_LIMIT"
# The one format of a snapshot's name; the agent's parser is
# src/memory/snapshot_name.cpp.
_SNAPSHOT = re.compile(r"^step_(\d{9})\.r(\d+)$")
_PARTIAL = ".partial"


def snapshot_name(step: int, rank: int) -> str:
    return f"step_{step:09d}.r{rank}"


def step_of(name: str) -> Optional[int]:
    """The step of a snapshot's name; None for anything else."""
    m = _SNAPSHOT.match(name)
    return int(m.group(1)) if m else None


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
    def __init__(self, root: Path, limit: Optional[int] = None) -> None:
        self.root = Path(root)
        self.limit = limit

    @classmethod
    def from_env(cls) -> Optional["MemoryTier"]:
        """The agent's tier, or None outside elasticrun (or with it off)."""
        root = os.environ.get(MEMORY_DIR_ENV)
        if not root:
            return None
        limit = os.environ.get(MEMORY_LIMIT_ENV)
        return cls(Path(root), int(limit) if limit else None)

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

    def check_budget(self, nbytes: int) -> None:
        """Raises when a snapshot of `nbytes` cannot be written beside the
        newest one this node keeps (the limit holds both at once)."""
        if self.limit is None:
            return
        kept = self.newest()
        held = _tree_bytes(kept) if kept is not None else 0
        if nbytes + held > self.limit:
            raise RuntimeError(
                f"elasticrun: the memory tier holds at most {self.limit} bytes "
                f"(--memory-tier-limit), and a snapshot of this state takes {nbytes} bytes beside "
                f"the {held} bytes of the one kept ({self.root}); raise the limit or save "
                f"to a checkpoint directory instead")

    def write(self, step: int, rank: int, state: dict) -> Path:
        """Writes `state` (a DCP state dict, on CPU or not) as rank `rank`'s
        snapshot of `step`, publishes it, and removes this node's older
        snapshots. No collective."""
        import warnings

        import torch.distributed.checkpoint as dcp

        self.check_budget(state_bytes(state))
        name = snapshot_name(step, rank)
        final, partial = self.root / name, self.root / (name + _PARTIAL)
        shutil.rmtree(partial, ignore_errors=True)
        with warnings.catch_warnings():
            # "assuming the intent is to save in a single process": it is.
            warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
            dcp.save(state, checkpoint_id=partial, no_dist=True)
        shutil.rmtree(final, ignore_errors=True)  # the same step again (a repeated step)
        os.replace(partial, final)
        for old in self.snapshots():
            if step_of(old.name) < step:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def load(self, step: int, state: dict) -> Path:
        """Fills `state` from this node's snapshot of `step`: any rank's, as
        the state it holds is every rank's (it is not sharded). Returns the
        snapshot; raises naming the step and the directory when this node
        holds none of that step."""
        import torch.distributed.checkpoint as dcp

        held = [p for p in self.snapshots() if step_of(p.name) == step]
        if not held:
            raise RuntimeError(
                f"elasticrun: no memory snapshot of step {step}, the one chosen for this round, "
                f"is on this node ({self.root}); its agent could not fetch it from any peer "
                f"(see the agent's log)")
        dcp.load(state, checkpoint_id=held[0], no_dist=True)
        return held[0]


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
