"""A gloo worker for bench/health_bench.py's survivor case: one per node,
all-reducing every step through the SDK.

In generation --gen (the first round: 1), rank --bad-rank records "fault"
(time.time()) and SIGSTOPs itself at step --at. The other rank, blocked in
that step's all_reduce, records "released" with the time the collective
raised (the SDK's release, after the agents ended the round) and exits 3.
Ranks record "start" (pid) first.
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
p.add_argument("--bad-rank", type=int, default=1)
p.add_argument("--at", type=int, default=20)
p.add_argument("--gen", type=int, default=1)
args = p.parse_args()
rank = int(os.environ["RANK"])
generation = int(os.environ.get("ELASTICRUN_GENERATION", "0"))


def record(ev: str, **fields) -> None:
    line = json.dumps(dict(event=ev, rank=rank, gen=generation, pid=os.getpid(), t=time.time(),
                           **fields))
    with open(Path(args.events) / "events.jsonl", "a") as f:
        f.write(line + "\n")


record("start")
elasticrun.attach()
dist.init_process_group("gloo")
t = torch.ones(1)
step = 0
while True:
    if generation == args.gen and rank == args.bad_rank and step == args.at:
        record("fault", step=step)
        os.kill(os.getpid(), signal.SIGSTOP)
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        record("released", step=step, error=str(e)[:300])
        os._exit(3)
    time.sleep(0.05)
    elasticrun.step(step)
    step += 1
