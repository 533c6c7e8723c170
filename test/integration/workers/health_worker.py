"""A worker for test_health.py: steps through the SDK and misbehaves on cue.

Every local rank publishes a step every --step-time seconds through
elasticrun.step(); the rank given by --bad-rank (local rank) does, from step
--at on, what --mode says:

  hang        sleeps forever in the loop (no exit, no progress)
  stop        SIGSTOPs itself
  nan         reports a NaN loss once, then goes on with finite ones
  startup     attaches and never publishes a step (every rank)
  section     spends --section-time seconds in elasticrun.section("eval")
              (every rank, once), then finishes
  allreduce   (with --torch) never enters the step's all_reduce: the other
              ranks block inside it
  crash       exits 1
  none        nothing: every rank finishes after --steps steps

Only attempt --bad-attempt (TORCHELASTIC_RESTART_COUNT) misbehaves, so a
restart can succeed; -1: every attempt. With --torch every step all-reduces a tensor over gloo.
Each rank writes its pid to <dir>/pid.rank<R>.attempt<A> when it starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import elasticrun

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--mode", default="none")
p.add_argument("--bad-rank", type=int, default=1)
p.add_argument("--bad-attempt", type=int, default=0)
p.add_argument("--at", type=int, default=5)
p.add_argument("--steps", type=int, default=40)
p.add_argument("--step-time", type=float, default=0.05)
p.add_argument("--section-time", type=float, default=3.0)
p.add_argument("--torch", action="store_true")
args = p.parse_args()

local_rank = int(os.environ["LOCAL_RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
Path(args.dir, f"pid.rank{os.environ['RANK']}.attempt{attempt}").write_text(str(os.getpid()))
bad = args.bad_attempt in (attempt, -1) and (local_rank == args.bad_rank or args.mode in
                                           ("startup", "section"))

elasticrun.attach()
if args.torch:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")

if bad and args.mode == "startup":
    while True:
        time.sleep(1)

for step in range(args.steps):
    if bad and step >= args.at:
        if args.mode == "hang":
            while True:
                time.sleep(1)
        if args.mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if args.mode == "crash":
            os._exit(1)
        if args.mode == "allreduce":
            while True:
                time.sleep(1)
        if args.mode == "section" and step == args.at:
            with elasticrun.section("eval"):
                time.sleep(args.section_time)
    if args.torch:
        t = torch.ones(4)
        dist.all_reduce(t)
    time.sleep(args.step_time)
    loss = float("nan") if bad and args.mode == "nan" and step == args.at else 1.0 / (step + 1)
    elasticrun.step(step, loss=loss)

if args.torch:
    dist.destroy_process_group()
