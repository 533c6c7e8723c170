"""A worker for bench/health_bench.py that does not use the SDK (no steps
published: the log rules are its monitors, py-spy reads its stacks). Local
rank --rank misbehaves, the others wait; every rank exits after --seconds:

  oom    prints a traceback ending in "CUDA out of memory" to stderr
  lines  prints a "[Epoch 0 Batch N ...]" line every 0.1 s, --lines of
         them, then goes silent (it keeps running)

Appends JSON lines to <events>/events.jsonl: "start" (pid, local rank) and
"fault" with time.time() just before the out-of-memory line is written,
or just after the last batch line was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("events")
p.add_argument("--mode", required=True)
p.add_argument("--rank", type=int, default=0)
p.add_argument("--lines", type=int, default=10)
p.add_argument("--seconds", type=float, default=120)
args = p.parse_args()
local_rank = int(os.environ["LOCAL_RANK"])
start = time.monotonic()


def record(ev: str, **fields) -> None:
    line = json.dumps(dict(event=ev, rank=local_rank, pid=os.getpid(), t=time.time(), **fields))
    with open(Path(args.events) / "events.jsonl", "a") as f:
        f.write(line + "\n")


record("start")
if local_rank == args.rank:
    if args.mode == "oom":
        time.sleep(0.5)
        record("fault")
        sys.stderr.write("Traceback (most recent call last):\n  File \"train.py\", line 3\n"
                         "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        sys.stderr.flush()
    elif args.mode == "lines":
        for n in range(args.lines):
            print(f"[Epoch 0 Batch {n} Step {n}] {{'training_loss_step': 0.5, "
                  f"'samples/sec': 100.0}}", flush=True)
            if n == args.lines - 1:
                record("fault", lines=n + 1)
            time.sleep(0.1)
while time.monotonic() - start < args.seconds:
    time.sleep(0.1)
