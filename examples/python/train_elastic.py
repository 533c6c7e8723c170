"""A small elastic training job on synthetic data.

DDP (gloo on CPU, NCCL on GPU) over a constant global batch that the SDK
splits for whatever world size the job runs at; an elastic sampler whose
position is in the checkpoint, so every sample of an epoch is used exactly
once across resizes; sharded checkpoints that load at any world size, the
periodic ones written in the background (--sync-save: in the loop); and a
stop at the step every rank agreed on when elasticrun resizes the job.

Under elasticrun every save also goes to the node's memory tier (shared
memory its agent holds, docs/memory-tier.md), and a restart resumes from
there; without --ckpt the memory tier is the only copy, so the job needs no
shared storage.

When a rank dies, a surviving rank saves the state of the last step it
completed (CheckpointManager.rescue: under DDP every rank holds all of it),
and the restart resumes there rather than at the last periodic checkpoint;
--no-rescue turns that off.

It runs unchanged under torchrun (no resize then: a restart resumes from the
last checkpoint or rescue) and under elasticrun:

    elasticrun --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \\
        --rdzv-endpoint host:29400 --rdzv-id demo train_elastic.py --ckpt /shared/ckpt

With --log DIR (also spelt --step-log: torchrun takes --log for an
abbreviation of its own --log-dir and refuses it as ambiguous) each rank
appends one JSON line per step to DIR/steps.rank<R>.jsonl (the step, the
world size, its sample indices, the loss, the learning rate and the rank's
micro-batch), which examples/python/elastic_demo.py checks and plots. The
line goes out before the step's last collective, so a step that a rescue
keeps has every rank's line.

Under elasticrun --config FILE, the file's worldSizeOverrides
(docs/job-config.md) apply at each (re)start: the entry for the number of
nodes the job now runs on sets the base learning rate of the cosine schedule
(which continues where it was, at the new base) and the micro-batch size of
the plan (one size, or a range up to the largest that fits memory, as
elasticctl plan --emit-config writes it); sizes without an entry train with
--lr and --micro-batches. Under torchrun there is no file and nothing is
overridden.

With --events DIR each process appends timing records to
DIR/events.<pid>.jsonl (bench_events.py beside this file describes them).
bench/churn/ accounts for a run's wall time from them. --sample-s stands
in for compute that scales with the data: each rank pauses that long per
local sample inside every step, so a larger world makes steps shorter
without keeping the CPU busy.
"""

from __future__ import annotations

import time

T_START = time.time()  # before torch is imported: a restart's cost starts here

import argparse
import datetime
import json
import math
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import elasticrun
from elasticrun.batch import load_overrides, micro_batch_sizes, plan_batches
from elasticrun.checkpoint import CheckpointManager
from elasticrun.sampler import ElasticSampler

from bench_events import EventLog


def synthetic_data(n: int, features: int, seed: int):
    """The same regression problem on every rank: y = X w + noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", type=Path,
                   help="checkpoint directory shared by all nodes; without one, under elasticrun, "
                        "the state is kept in the nodes' memory tier only")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    p.add_argument("--global-batch", type=int, default=48)
    p.add_argument("--micro-batches", default="4,6,8", help="allowed micro-batch sizes")
    p.add_argument("--dataset", type=int, default=48 * 32, help="samples per epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--save-every", type=int, default=25, help="periodic checkpoint interval")
    p.add_argument("--sync-save", dest="async_save", action="store_false",
                   help="write periodic checkpoints in the training loop instead of in the "
                        "background (CheckpointManager.save_async)")
    p.add_argument("--no-rescue", dest="rescue", action="store_false",
                   help="after a failure, resume from the last periodic checkpoint instead of "
                        "the last step a surviving rank completed")
    p.add_argument("--step-s", type=float, default=0.0, help="pause per step (demo pacing)")
    p.add_argument("--log", "--step-log", dest="log", type=Path,
                   help="directory for per-step JSON lines")
    p.add_argument("--events", type=Path, help="directory for per-process timing records")
    p.add_argument("--sample-s", type=float, default=0.0,
                   help="pause per local sample in each step (compute stand-in)")
    p.add_argument("--pg-timeout", type=float,
                   help="seconds a collective or the process group's start may wait "
                        "(default: PyTorch's)")
    args = p.parse_args()
    events = EventLog(args.events)
    events.on_usr1()
    try:
        return train(args, events)
    except BaseException as e:
        events("error", t=time.time(), what=f"{type(e).__name__}: {e}"[:300])
        if not isinstance(e, Exception):
            raise
        # Report it as the interpreter would, then leave as on success.
        sys.excepthook(type(e), e, e.__traceback__)
        leave(1)


def leave(code: int) -> None:
    """Exits without the interpreter's teardown: after `import torch` it takes
    seconds (3-5 s on a loaded 2-core machine), time that the next round, or
    the end of the job, waits for. Nothing is lost: checkpoints are published
    and fsynced before this, and every file here is line-buffered."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def set_base_lr(opt: torch.optim.Optimizer, sched, base: float) -> None:
    """Makes `base` the cosine schedule's base learning rate from its current
    position on: the learning rate becomes what the schedule would give now
    had it started at `base`, and the following steps continue from there.
    When `base` already is the base nothing is touched, so a resumed run
    without overrides is bit for bit the run that never stopped."""
    if all(b == base for b in sched.base_lrs):
        return
    # eta_min is 0: the closed form, not a ratio of old to new (the old base
    # may be 0). CosineAnnealingLR steps recursively from group["lr"], so
    # setting it is enough for the steps that follow; base_lrs and
    # initial_lr are what it and the next checkpoint read.
    lr = base * (1 + math.cos(math.pi * sched.last_epoch / sched.T_max)) / 2
    for group in opt.param_groups:
        group["initial_lr"] = base
        group["lr"] = lr
    sched.base_lrs = [base] * len(opt.param_groups)
    sched._last_lr = [lr] * len(opt.param_groups)


def train(args, events: EventLog) -> int:
    elasticrun.attach()  # SIGUSR1 and the control block, under elasticrun
    use_cuda = torch.cuda.is_available()
    timeout = {"timeout": datetime.timedelta(seconds=args.pg_timeout)} if args.pg_timeout else {}
    dist.init_process_group("nccl" if use_cuda else "gloo", **timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)  # for the collectives of the checkpoints
    generation = int(os.environ.get("ELASTICRUN_GENERATION", "0"))
    events.begin(rank, world, generation, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                 t0=T_START, t_pg=time.time())

    torch.manual_seed(args.seed)
    x, y = synthetic_data(args.dataset, 16, args.seed)
    x, y = x.to(device), y.to(device)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)

    # worldSizeOverrides are keyed by nodes, not ranks (docs/job-config.md).
    nodes = int(os.environ.get("GROUP_WORLD_SIZE")
                or world // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    override = load_overrides().get(nodes, {})
    base_lr = override.get("learningRate", args.lr)

    # The same global batch at every world size: each rank's micro-batch and
    # the common number of accumulation steps come from the plan.
    micro_sizes = micro_batch_sizes(override, [int(s) for s in args.micro_batches.split(",")])
    plan = plan_batches(args.global_batch, world, micro_sizes)
    sampler = ElasticSampler(args.dataset, seed=args.seed)
    ckpt = CheckpointManager(args.ckpt, keep=3)
    t_load = time.time()
    state = ckpt.load(model, opt, sched)
    step = 0
    if state is not None:
        step = state["step"]
        sampler.load_state_dict(state["sampler"])
    # After the load: the checkpoint holds the base of the size it was saved at.
    set_base_lr(opt, sched, base_lr)
    sampler.set_world(rank, world, plan)
    events("init", t_load=t_load, t1=time.time(), from_step=step)
    if rank == 0:
        if override:
            given = ", ".join(f"{k} {v}" for k, v in sorted(override.items()))
            print(f"[train] override for {nodes} node{'s' if nodes != 1 else ''}: {given}",
                  flush=True)
        print(f"[train] generation {generation}: world size {world}, from step {step}, "
              f"{plan.describe()}, learning rate {opt.param_groups[0]['lr']:.6g}", flush=True)

    log = None
    if args.log is not None:
        args.log.mkdir(parents=True, exist_ok=True)
        log = open(args.log / f"steps.rank{rank}.jsonl", "a", buffering=1)

    def save(at: int, why: str) -> None:
        # Periodic saves go on in the background from a copy; the others
        # (a resize, the last) are waited for, with any save in flight.
        t0 = time.time()
        background = why == "periodic" and args.async_save
        (ckpt.save_async if background else ckpt.save)(
            at, model, opt, sched, extra={"sampler": sampler.state_dict()})
        events("save", step=at, why=why, t0=t0, t1=time.time(), background=background)

    micro = plan.micro_batch(rank)
    # Whether model, optimizer, scheduler and sampler all hold the state after
    # `step` steps: true everywhere but inside the update.
    consistent = True
    try:
        while step < args.steps:
            t_step = time.time()
            if sampler.steps_left == 0:
                sampler.set_epoch(sampler.epoch + 1)
            indices = sampler.step_indices()
            samples = sampler.next_step_samples
            lr = opt.param_groups[0]["lr"]  # this step's
            opt.zero_grad()
            chunks = [indices[i:i + micro] for i in range(0, plan.accum_steps * micro, micro)]
            local_loss = torch.zeros((), device=device)
            for k, chunk in enumerate(chunks):
                idx = torch.tensor(chunk, dtype=torch.long, device=device)
                # Sum over the rank's samples, scaled so that DDP's mean over
                # ranks gives the mean over the global batch whatever the split.
                loss = ((model(x[idx]) - y[idx]) ** 2).sum() * world / samples
                local_loss += loss.detach() / world
                if k + 1 < len(chunks):
                    with model.no_sync():
                        loss.backward()
                    continue
                # The step's record goes out before its last collective, the
                # gradients' all-reduce in this backward: a rank that keeps
                # this step (its all-reduce completed, so every rank entered
                # it) knows every rank wrote its record, even one that died
                # since. A rescue never keeps a step whose samples a log lacks.
                dist.all_reduce(local_loss)
                loss_value = local_loss.item()
                if log is not None:
                    log.write(json.dumps({"step": step + 1, "epoch": sampler.epoch,
                                          "gen": generation, "world": world,
                                          "global_batch": samples, "loss": loss_value,
                                          "lr": lr, "micro": micro, "indices": indices}) + "\n")
                loss.backward()
            if args.sample_s:
                # Compute that scales with the data, before the update: a
                # process that dies here has not completed this step. Timed
                # for the agents' straggler monitor (docs/health.md).
                with elasticrun.compute():
                    time.sleep(args.sample_s * len(indices))
            consistent = False  # the update: a failure here leaves no whole step
            opt.step()
            sched.step()
            sampler.advance()
            step += 1
            consistent = True
            events("step", step=step, t0=t_step, t1=time.time())
            elasticrun.step(step, loss=loss_value)
            if elasticrun.elastic_event_detected():
                # Every rank reaches this at the same step: save and go; the
                # agents restart the job at its new size from here.
                elasticrun.stopped()
                save(step, "resize")
                elasticrun.saved()
                if rank == 0:
                    print(f"[train] stopped at step {step} for a resize; checkpoint saved", flush=True)
                events("exit", t=time.time(), how="resize")
                leave(0)  # the next round waits for this process to be gone
            if step % args.save_every == 0:
                save(step, "periodic")
            if args.step_s:
                time.sleep(args.step_s)
        save(step, "final")
    except Exception:
        # A collective failed (a peer died), or the step raised: the state
        # of the last whole step is still here and, under DDP, the same on
        # every rank. Keeping it spares the next attempt the steps since
        # the last checkpoint; one surviving rank writes it.
        if consistent and args.rescue:
            t0 = time.time()
            if ckpt.rescue(step, model, opt, sched, extra={"sampler": sampler.state_dict()}):
                events("save", step=step, why="rescue", t0=t0, t1=time.time())
        raise
    if rank == 0:
        print(f"[train] done: {step} steps, loss {loss_value:.4f}", flush=True)
    dist.destroy_process_group()
    events("exit", t=time.time(), how="done")
    return 0


if __name__ == "__main__":
    leave(main())
