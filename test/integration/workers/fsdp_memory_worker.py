"""An FSDP2 worker (gloo, CPU) for test_memory_tier.py whose state lives in
the memory tier only (CheckpointManager(None); with --ckpt DIR, in that
directory too): every rank saves its own
shards every --save-every steps in the background, and at a resize's
agreed step. It records in <events>/events.jsonl, as rank 0, a digest of
the whole state (every parameter and optimizer tensor gathered, their
bytes hashed) at each save and after each load, so the test can tell
that a restore, resharded to another world size through the agents'
fetches, is bit for bit what was saved.

--die-after N: the rank given by --die-rank SIGKILLs itself N steps into
the first generation at world size 2 (once: a file in <events> says so).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import elasticrun
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from elasticrun.checkpoint import CheckpointManager

p = argparse.ArgumentParser()
p.add_argument("events", type=Path)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--save-every", type=int, default=4)
p.add_argument("--step-s", type=float, default=0.05)
p.add_argument("--die-after", type=int, default=-1)
p.add_argument("--die-rank", type=int, default=1)
p.add_argument("--ckpt", type=Path, help="a checkpoint directory too (default: the tier only)")
args = p.parse_args()
args.events.mkdir(parents=True, exist_ok=True)

elasticrun.attach()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
generation = int(os.environ.get("ELASTICRUN_GENERATION", "0"))


def record(ev: str, **fields) -> None:
    with open(args.events / "events.jsonl", "a") as f:
        f.write(json.dumps(dict(event=ev, rank=rank, world=world, gen=generation,
                                pid=os.getpid(), t=time.time(), **fields)) + "\n")


torch.manual_seed(generation)  # a fresh model each time: only the restore carries state
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 13),
                            torch.nn.Tanh(), torch.nn.Linear(13, 3))
mesh = init_device_mesh("cpu", (world,))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
ckpt = CheckpointManager(args.ckpt)


def digest() -> str:
    """Every rank takes part (full_tensor gathers); rank 0's is the answer."""
    h = hashlib.sha256()
    for name, param in model.named_parameters():
        h.update(name.encode())
        h.update(param.full_tensor().detach().numpy().tobytes())
        for key in sorted(opt.state.get(param, {})):
            value = opt.state[param][key]
            full = value.full_tensor() if hasattr(value, "full_tensor") else value
            h.update(key.encode())
            h.update(full.detach().numpy().tobytes())
    return h.hexdigest()


state = ckpt.load(model, opt)
step = state["step"] if state else 0
d = digest()
if rank == 0:
    record("loaded", step=step, digest=d, source=ckpt.loaded_from)
record("start", step=step)
die_at = step + args.die_after if args.die_after >= 0 and world == 2 else -1
died = args.events / "died"
while step < args.steps:
    if step == die_at and rank == args.die_rank and not died.exists():
        died.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    g = torch.Generator().manual_seed(1000 * step + rank)
    model(torch.randn(6, 5, generator=g)).pow(2).sum().backward()
    opt.step()
    step += 1
    elasticrun.step(step)
    resize = elasticrun.elastic_event_detected()
    if resize or step % args.save_every == 0:
        d = digest()
        if rank == 0:
            record("saved", step=step, digest=d, why="resize" if resize else "periodic")
        (ckpt.save if resize else ckpt.save_async)(step, model, opt)
    if resize:
        elasticrun.saved()
        dist.destroy_process_group()
        os._exit(0)
    time.sleep(args.step_s)
ckpt.wait()
dist.destroy_process_group()
os._exit(0)
