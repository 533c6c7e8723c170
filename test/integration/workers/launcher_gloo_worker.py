"""One rank of a gloo job started by a launcher, exactly as a user's
training script would be: init_process_group("gloo") from env://, an
all_reduce of rank + 1, a barrier, destroy.

Writes <dir>/ok.rank<RANK>.attempt<TORCHELASTIC_RESTART_COUNT> holding the
sum when the collectives succeed; any failure raises (exit status 1).

  --crash-rank R --crash-attempt A   rank R exits 1 on attempt A, after it
                                     joined the process group (so the store
                                     holds that attempt's keys) and before
                                     the all_reduce; --crash-attempt may be
                                     given more than once
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=60)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--crash-rank", type=int)
    p.add_argument("--crash-attempt", type=int, action="append")
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])

    dist.init_process_group("gloo", init_method="env://", timeout=TIMEOUT)
    assert dist.get_rank() == rank and dist.get_world_size() == world_size
    if args.crash_rank == rank and attempt in (args.crash_attempt or [0]):
        print(f"rank {rank}: crashing on attempt {attempt} as asked", file=sys.stderr, flush=True)
        os._exit(1)

    t = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(t)
    expected = world_size * (world_size + 1) // 2
    if t.item() != expected:
        raise SystemExit(f"rank {rank}: all_reduce gave {t.item()}, expected {expected}")
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(args.dir, f"ok.rank{rank}.attempt{attempt}"), "w") as f:
        f.write(str(t.item()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
