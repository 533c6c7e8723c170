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
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

_STEP_DIR = re.compile(r"^step_(\d{9})$")
LATEST = "latest"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, text: str) -> None:
    """Temp file, fsync, rename over path, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class CheckpointManager:
    def __init__(self, root: str | os.PathLike, keep: int = 3):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        self.root = Path(root)
        self.keep = keep

    # --- what is on disk

    def latest(self) -> Optional[Path]:
        """The published checkpoint `latest` names, or None."""
        try:
            name = (self.root / LATEST).read_text().strip()
        except FileNotFoundError:
            return None
        if not _STEP_DIR.match(name) or not (self.root / name).is_dir():
            raise RuntimeError(f"{self.root / LATEST} names {name!r}, which is not a checkpoint")
        return self.root / name

    def published(self) -> list[Path]:
        """Published checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _STEP_DIR.match(p.name) and p.is_dir())

    # --- collectives

    def save(self, step: int, model, optimizer=None, scheduler=None,
             extra: Optional[dict[str, Any]] = None) -> Path:
        """Writes this rank's shard of step `step` and publishes the
        checkpoint once every rank has written. Returns its directory."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        name = f"step_{step:09d}"
        final = self.root / name
        partial = self.root / (name + ".partial")
        rank = dist.get_rank() if dist.is_initialized() else 0
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(partial, ignore_errors=True)  # a crash of an earlier save
        _barrier()
        dcp.save(self._state(model, optimizer, scheduler, extra, step), checkpoint_id=partial)
        _barrier()
        if rank == 0:
            _fsync_dir(partial)
            if final.exists():  # the same step saved again (a restart that repeated it)
                shutil.rmtree(final)
            os.replace(partial, final)
            _fsync_dir(self.root)
            _write_atomically(self.root / LATEST, name + "\n")
            for old in self.published()[:-self.keep]:
                shutil.rmtree(old, ignore_errors=True)
            for stale in self.root.glob("step_*.partial"):
                shutil.rmtree(stale, ignore_errors=True)
        _barrier()
        return final

    def load(self, model, optimizer=None, scheduler=None) -> Optional[dict[str, Any]]:
        """Loads the latest checkpoint into model/optimizer/scheduler, whatever
        the world size it was written at. Returns {"step": n, **extra}, or
        None when there is none."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        path = self.latest()
        if path is None:
            return None
        state = self._state(model, optimizer, scheduler, None, 0)
        dcp.load(state, checkpoint_id=path)
        set_state_dict(model, optimizer if optimizer is not None else [],
                       model_state_dict=state["model"],
                       optim_state_dict=state.get("optim", {}))
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        out = json.loads(state["extra"])
        out["step"] = int(state["step"])
        return out

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


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
