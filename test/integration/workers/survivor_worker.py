"""A gloo worker for test_survivors.py: all-reduces every step through the
SDK, and records in <events>/events.jsonl what becomes of it when a peer
misbehaves.

The rank given by --bad-rank does, at step --at, what --mode says: "stop"
(SIGSTOPs itself), "absent" (never enters the step's all_reduce: sleeps).
Every other rank, blocked in that all_reduce, records "released" with the
error and the time when the collective raises (the SDK released it after
the agent published the failure), marks itself as saving (as a rescue
would), waits a moment and exits 3. Ranks write "start" when they begin.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import elasticrun
import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("events")
p.add_argument("--mode", default="none")
p.add_argument("--bad-rank", type=int, default=1)
p.add_argument("--at", type=int, default=20)
p.add_argument("--steps", type=int, default=100000)
args = p.parse_args()

rank = int(os.environ["RANK"])
generation = int(os.environ.get("ELASTICRUN_GENERATION", "0"))
events = Path(args.events)
events.mkdir(parents=True, exist_ok=True)


def record(ev: str, **fields) -> None:
    line = json.dumps(dict(event=ev, rank=rank, gen=generation, pid=os.getpid(), t=time.time(),
                           **fields))
    with open(events / "events.jsonl", "a") as f:
        f.write(line + "\n")


elasticrun.attach()
dist.init_process_group("gloo")
record("start", world=dist.get_world_size())
t = torch.ones(1)
for step in range(args.steps):
    if generation == 1 and rank == args.bad_rank and step == args.at:
        record("misbehave", mode=args.mode, step=step)
        if args.mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif args.mode == "absent":
            while True:
                time.sleep(1)
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        record("released", step=step, error=str(e)[:300])
        elasticrun.stopped()  # as a rescue in progress would
        time.sleep(0.5)
        os._exit(3)
    time.sleep(0.05)
    elasticrun.step(step)
dist.destroy_process_group()
record("finish")
