"""A worker for bench/health_bench.py: plain Python on the elasticrun SDK
(torch only with --torch), stepping every --step-s seconds. Local rank
--bad-rank misbehaves at step --at, as --mode says:

  hang        sleeps forever in the loop: no exit, no progress
  stop        SIGSTOPs itself
  nan         reports a NaN loss once, then finite ones
  allreduce   (with --torch: every step all-reduces over gloo) never enters
              the step's all_reduce; the other rank blocks inside it
  none        every rank steps on: with --print, one HyperPod-style
              "[Epoch 0 Batch N ...]" line per step; steps are timed with
              elasticrun.compute() and carry a loss

Appends JSON lines to <events>/events.jsonl: "start" (pid, local rank),
"stepped" (after its first step), and "fault" with time.time() taken just
before the misbehaviour, the clock the harness measures with.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import elasticrun

p = argparse.ArgumentParser()
p.add_argument("events")
p.add_argument("--mode", default="none")
p.add_argument("--bad-rank", type=int, default=1)
p.add_argument("--at", type=int, default=5)
p.add_argument("--steps", type=int, default=10**9)
p.add_argument("--step-s", type=float, default=0.05)
p.add_argument("--torch", action="store_true")
p.add_argument("--print", action="store_true")
args = p.parse_args()
local_rank = int(os.environ["LOCAL_RANK"])
bad = local_rank == args.bad_rank and args.mode != "none"


def record(ev: str, **fields) -> None:
    line = json.dumps(dict(event=ev, rank=local_rank, pid=os.getpid(), t=time.time(), **fields))
    with open(Path(args.events) / "events.jsonl", "a") as f:
        f.write(line + "\n")


record("start")
elasticrun.attach()
if args.torch:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
if args.print and local_rank == 0:
    print("Experiment configuration: health_bench", flush=True)

for step in range(args.steps):
    if bad and step == args.at:
        if args.mode in ("hang", "allreduce"):
            record("fault", step=step)
            while True:
                time.sleep(1)
        if args.mode == "stop":
            record("fault", step=step)
            os.kill(os.getpid(), signal.SIGSTOP)
    if args.torch:
        dist.all_reduce(tensor)
    with elasticrun.compute():
        time.sleep(args.step_s)
    loss = 1.0 / (step + 1)
    if bad and args.mode == "nan" and step == args.at:
        loss = float("nan")
        record("fault", step=step)
    elasticrun.step(step, loss=loss)
    if args.print:
        print(f"[Epoch 0 Batch {step} Step {step}] {{'training_loss_step': {loss:.4f}, "
              f"'samples/sec': {1000.0 + step % 7}}}", flush=True)
    if step == 0:
        record("stepped")
