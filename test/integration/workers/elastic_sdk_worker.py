"""A gloo worker that uses elasticrun's worker SDK to stop at the agreed step.

It resumes from <dir>/ckpt.rank<R> (the step all ranks saved; every rank
saves the same step, so any rank's file would do), steps with one all_reduce
each, publishes each step to the control block, and when
elasticrun.elastic_event_detected() says the job is being resized, records
the step, "saves" (writes its step) and exits 0. It stops for good when
<dir>/finish exists (agreed through the all_reduce). Events go to
<dir>/events.jsonl like elastic_worker.py.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import elasticrun


def record(directory: Path, **fields) -> None:
    line = (json.dumps(fields) + "\n").encode()
    fd = os.open(directory / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--step-s", type=float, default=0.02)
    args = parser.parse_args()

    elasticrun.attach()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    saved = sorted(int(p.read_text()) for p in args.dir.glob("ckpt.*"))
    start = saved[-1] if saved else 0
    who = {"rank": rank, "world": world, "gen": int(os.environ["ELASTICRUN_GENERATION"]),
           "agent": os.getppid(), "pid": os.getpid()}
    record(args.dir, event="start", step=start, **who)
    step = start
    while True:
        finish = 1.0 if (args.dir / "finish").exists() else 0.0
        t = torch.tensor([float(rank + 1), finish])
        dist.all_reduce(t)
        step += 1
        elasticrun.step(step)
        if t[0].item() != world * (world + 1) / 2:
            record(args.dir, event="mismatch", step=step, **who)
            return 3
        if step == start + 5:
            record(args.dir, event="steady", step=step, **who)
        if t[1].item() > 0:
            record(args.dir, event="finish", step=step, **who)
            break
        if elasticrun.elastic_event_detected():
            (args.dir / f"ckpt.rank{rank}.gen{who['gen']}").write_text(str(step))
            elasticrun.saved()
            record(args.dir, event="stop", step=step, signal=elasticrun.signal_received(),
                   **who)
            return 0
        time.sleep(args.step_s)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
