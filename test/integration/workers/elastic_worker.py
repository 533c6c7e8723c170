"""A long-running gloo worker for the elastic suites.

Every step all-reduces (rank + 1, finish flag): the sum checks the collective
(n(n+1)/2 for n ranks) and the flag lets every rank stop at the same step once
<dir>/finish exists. Each start, the fifth step ("steady": the generation's
collectives work) and the end are appended as JSON lines to
<dir>/events.jsonl, with the agent's pid (the parent) so a test can tell
which agent runs which rank.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def record(directory: Path, **fields) -> None:
    line = (json.dumps(fields) + "\n").encode()
    fd = os.open(directory / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of a short line: appends never interleave
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--step-s", type=float, default=0.05)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    who = {
        "rank": rank,
        "world": world,
        "gen": int(os.environ.get("ELASTICRUN_GENERATION", "0")),
        "group_rank": int(os.environ["GROUP_RANK"]),
        "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
        "agent": os.getppid(),
        "pid": os.getpid(),
    }
    record(args.dir, event="start", **who)
    step = 0
    while True:
        finish = 1.0 if (args.dir / "finish").exists() else 0.0
        t = torch.tensor([float(rank + 1), finish])
        dist.all_reduce(t)
        step += 1
        if t[0].item() != world * (world + 1) / 2:
            record(args.dir, event="mismatch", step=step, got=t[0].item(), **who)
            return 3
        if step == 5:
            record(args.dir, event="steady", step=step, **who)
        if t[1].item() > 0:
            break
        time.sleep(args.step_s)
    record(args.dir, event="finish", step=step, **who)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
