"""One rank of a gloo job whose store is an external server (the agent's).

Environment: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
TORCHELASTIC_USE_AGENT_STORE=True, as an elastic agent would set them.
If JOB_PREFIX is set, the rank builds the store client itself, exactly as
init_method="env://" does in agent-store mode, and wraps it in
PrefixStore(JOB_PREFIX): PyTorch >= 2.x no longer prefixes keys per restart
in agent-store mode, so a second job on the same store needs its own
namespace or it would read the first job's stale gloo addresses.

All-reduces tensor([rank + 1]) and checks the sum n(n+1)/2, then runs a
barrier. Exits 0 on success; any failure raises, so the exit status is 1.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=60)


def main() -> int:
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    prefix = os.environ.get("JOB_PREFIX")
    if prefix:
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            world_size,
            is_master=False,
            timeout=TIMEOUT,
        )
        dist.init_process_group(
            "gloo",
            store=dist.PrefixStore(prefix, store),
            rank=rank,
            world_size=world_size,
            timeout=TIMEOUT,
        )
    else:
        dist.init_process_group("gloo", init_method="env://", timeout=TIMEOUT)
    assert dist.get_rank() == rank and dist.get_world_size() == world_size

    t = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(t)
    expected = world_size * (world_size + 1) // 2
    if t.item() != expected:
        raise SystemExit(f"rank {rank}: all_reduce gave {t.item()}, expected {expected}")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: ok sum={t.item()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
