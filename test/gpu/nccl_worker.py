"""An NCCL worker for test/gpu/gpu_checks.py: test/integration/workers/
survivor_worker.py on CUDA tensors. Each rank runs on cuda:LOCAL_RANK and
all-reduces a tensor every step through the SDK, and records in
<events>/events.jsonl what becomes of it when a peer misbehaves.

The rank given by --bad-rank (global rank) does, at step --at of the
job's first run (no <events>/misbehaved yet), what --mode says: "stop"
(SIGSTOPs itself), "absent" (never enters the step's all_reduce). Every
other rank, blocked in that all_reduce (NCCL's kernel spins; the CPU waits
in the synchronize), records "released" with the error and the time when
a step raises (the SDK aborted the NCCL process group after the agent
published the failure), marks itself as saving, waits a moment and exits
3. Ranks record "start" and, at the end of a run, "finish".

--backend gloo runs the same on CPU tensors: a rehearsal of the checks'
harness on a machine without GPUs (gpu_checks.py --backend gloo).
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
p.add_argument("--steps", type=int, default=60)
p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
args = p.parse_args()

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
events = Path(args.events)
events.mkdir(parents=True, exist_ok=True)
first_run = not (events / "misbehaved").exists()


def record(ev: str, **fields) -> None:
    line = json.dumps(dict(event=ev, rank=rank, first_run=first_run, pid=os.getpid(),
                           t=time.time(), **fields))
    with open(events / "events.jsonl", "a") as f:
        f.write(line + "\n")


elasticrun.attach()
if args.backend == "nccl":
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    record("start", world=dist.get_world_size(), gpu=torch.cuda.get_device_name(device))
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
    record("start", world=dist.get_world_size(), gpu=None)
t = torch.ones(1, device=device)
for step in range(args.steps):
    if first_run and rank == args.bad_rank and step == args.at:
        (events / "misbehaved").write_text(str(os.getpid()))
        record("misbehave", mode=args.mode, step=step)
        if args.mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif args.mode == "absent":
            while True:
                time.sleep(1)
    try:
        dist.all_reduce(t)
        # NCCL returns at once; the CPU waits for the collective here. An
        # aborted communicator ends the kernel; the step that follows raises.
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t.fill_(1.0)
    except Exception as e:  # noqa: BLE001: NCCL's errors have no common type
        record("released", step=step, error=str(e)[:300])
        elasticrun.stopped()  # as a rescue in progress would
        time.sleep(0.5)
        os._exit(3)
    time.sleep(0.05)
    elasticrun.step(step)
dist.destroy_process_group()
record("finish")
