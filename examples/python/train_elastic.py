"""A small elastic training job on synthetic data.

DDP (gloo on CPU, NCCL on GPU) over a constant global batch that the SDK
splits for whatever world size the job runs at; an elastic sampler whose
position is in the checkpoint, so every sample of an epoch is used exactly
once across resizes; sharded checkpoints that load at any world size; and a
stop at the step every rank agreed on when elasticrun resizes the job.

It runs unchanged under torchrun (no resize then: a restart resumes from the
last checkpoint) and under elasticrun:

    elasticrun --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \\
        --rdzv-endpoint host:29400 --rdzv-id demo train_elastic.py --ckpt /shared/ckpt

With --log DIR each rank appends one JSON line per step to
DIR/steps.rank<R>.jsonl (the step, the world size, its sample indices, the
loss), which examples/python/elastic_demo.py checks and plots.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import elasticrun
from elasticrun.batch import plan_batches
from elasticrun.checkpoint import CheckpointManager
from elasticrun.sampler import ElasticSampler


def synthetic_data(n: int, features: int, seed: int):
    """The same regression problem on every rank: y = X w + noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", type=Path, required=True, help="checkpoint directory shared by all nodes")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    p.add_argument("--global-batch", type=int, default=48)
    p.add_argument("--micro-batches", default="4,6,8", help="allowed micro-batch sizes")
    p.add_argument("--dataset", type=int, default=48 * 32, help="samples per epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save-every", type=int, default=25, help="periodic checkpoint interval")
    p.add_argument("--step-s", type=float, default=0.0, help="pause per step (demo pacing)")
    p.add_argument("--log", type=Path, help="directory for per-step JSON lines")
    args = p.parse_args()

    elasticrun.attach()  # SIGUSR1 and the control block, under elasticrun
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    generation = int(os.environ.get("ELASTICRUN_GENERATION", "0"))

    torch.manual_seed(args.seed)
    x, y = synthetic_data(args.dataset, 16, args.seed)
    x, y = x.to(device), y.to(device)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)

    # The same global batch at every world size: each rank's micro-batch and
    # the common number of accumulation steps come from the plan.
    plan = plan_batches(args.global_batch, world, [int(s) for s in args.micro_batches.split(",")])
    sampler = ElasticSampler(args.dataset, seed=args.seed)
    ckpt = CheckpointManager(args.ckpt, keep=3)
    state = ckpt.load(model, opt, sched)
    step = 0
    if state is not None:
        step = state["step"]
        sampler.load_state_dict(state["sampler"])
    sampler.set_world(rank, world, plan)
    if rank == 0:
        print(f"[train] generation {generation}: world size {world}, from step {step}, "
              f"{plan.describe()}", flush=True)

    log = None
    if args.log is not None:
        args.log.mkdir(parents=True, exist_ok=True)
        log = open(args.log / f"steps.rank{rank}.jsonl", "a", buffering=1)

    def save(at: int) -> None:
        ckpt.save(at, model, opt, sched, extra={"sampler": sampler.state_dict()})

    micro = plan.micro_batch(rank)
    while step < args.steps:
        if sampler.steps_left == 0:
            sampler.set_epoch(sampler.epoch + 1)
        indices = sampler.step_indices()
        samples = sampler.next_step_samples
        opt.zero_grad()
        chunks = [indices[i:i + micro] for i in range(0, plan.accum_steps * micro, micro)]
        local_loss = torch.zeros((), device=device)
        for k, chunk in enumerate(chunks):
            idx = torch.tensor(chunk, dtype=torch.long, device=device)
            # Sum over the rank's samples, scaled so that DDP's mean over
            # ranks gives the mean over the global batch whatever the split.
            loss = ((model(x[idx]) - y[idx]) ** 2).sum() * world / samples
            if k + 1 < len(chunks):
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
            local_loss += loss.detach() / world
        opt.step()
        sched.step()
        sampler.advance()
        step += 1
        dist.all_reduce(local_loss)
        loss_value = local_loss.item()
        elasticrun.step(step, loss=loss_value)
        if log is not None:
            log.write(json.dumps({"step": step, "epoch": sampler.epoch, "gen": generation,
                                  "world": world, "global_batch": samples, "loss": loss_value,
                                  "indices": indices}) + "\n")
        if elasticrun.elastic_event_detected():
            # Every rank reaches this at the same step: save and go; the
            # agents restart the job at its new size from here.
            save(step)
            elasticrun.saved()
            if rank == 0:
                print(f"[train] stopped at step {step} for a resize; checkpoint saved", flush=True)
            return 0
        if step % args.save_every == 0:
            save(step)
        if args.step_s:
            time.sleep(args.step_s)
    save(step)
    if rank == 0:
        print(f"[train] done: {step} steps, loss {loss_value:.4f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
