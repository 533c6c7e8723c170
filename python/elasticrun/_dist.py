"""What torch.distributed says of this process and of a state, for the
checkpoints (checkpoint.py): its rank, the group's size, a barrier, and
which tensors of a state hold only this rank's part. Each works without a
process group too (one process, rank 0)."""

from __future__ import annotations

import os
from typing import Any


def sharded_tensors(state: Any) -> list[str]:
    """Keys of the tensors in state that hold only this rank's part."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    from torch.distributed.tensor import DTensor

    found: list[str] = []

    def walk(value: Any, key: str) -> None:
        if isinstance(value, (DTensor, ShardedTensor)):
            found.append(key)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{key}.{i}")

    walk(state, "")
    return found


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def group_rank() -> int:
    """This process's rank in the default group; 0 without one (it is the
    only process that saves)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
