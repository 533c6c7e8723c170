"""examples/python/train_elastic.py's job, recovered in process.

The same model, data, global batch, sampler and schedule as
train_elastic.py, trained through elasticrun.inprocess.run(): under
`elasticrun --inprocess-restart` the workers of a resized job, and the
survivors of a failure elsewhere, do not exit. They park when their round
ends, join the next round's process group in the same process, and go on
from the state in memory; a joining node's workers, and a restarted one,
receive that state from a survivor instead of reading a checkpoint.

    elasticrun --inprocess-restart --nnodes 2:4 --nproc-per-node 1 \\
        --rdzv-backend c10d --rdzv-endpoint host:29400 --rdzv-id demo \\
        train_inprocess.py --steps 500

Checkpoints are optional (--ckpt DIR: periodic ones every --save-every
steps, and one at the end; the job's first round loads the latest). Under
elasticrun the periodic ones go to the agents' memory tiers too, and
without --ckpt to the tiers only (docs/memory-tier.md): a round in which no
worker holds state (every worker restarted at once, a full-job restart)
loads the newest of them, from memory, instead of starting from step 0.
With neither, the job survives resizes and peers' failures, not the loss
of every worker at once.

Under torchrun it trains at a fixed size, and restarts from --ckpt as
train_elastic.py does.

With --log DIR each rank appends one JSON line per step to
DIR/steps.rank<R>.jsonl: train_elastic.py's record (the step, the epoch,
the generation, the world size, the sample indices, the loss, the learning
rate, the micro-batch), the time (`t`, time.time()), the process id (`pid`), so a test can tell a
process that went on from one that started again, and a hash of the
parameters the step started from (`params`).

With --events DIR each process appends bench/churn/'s timing records
(bench_events.py beside this file): a "start" and an "init" per round, so a
round is one set of workers there whether its processes are new or went on
from the last round (then "start" is the end of the park, "init" the state
from a peer), and an "exit" with how="park" where a process waits for the
next round. --sample-s is train_elastic.py's compute stand-in.
"""

from __future__ import annotations

import time

T_START = time.time()  # before torch is imported: a process's start costs from here

import argparse
import datetime
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import elasticrun
from elasticrun.batch import plan_batches
from elasticrun.checkpoint import CheckpointManager, memory_tier_available
from elasticrun.inprocess import State, World, run
from elasticrun.sampler import ElasticSampler

from bench_events import EventLog


def synthetic_data(n: int, features: int, seed: int):
    """The same regression problem on every rank: y = X w + noise (as in
    train_elastic.py)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def params_digest(model: torch.nn.Module) -> str:
    """A hash of the parameters' bytes: equal on two ranks only when their
    weights are equal bit for bit."""
    h = hashlib.sha1()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    p.add_argument("--global-batch", type=int, default=48)
    p.add_argument("--micro-batches", default="4,6,8", help="allowed micro-batch sizes")
    p.add_argument("--dataset", type=int, default=48 * 32, help="samples per epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--ckpt", type=Path, help="checkpoint directory (optional)")
    p.add_argument("--save-every", type=int, default=25, help="periodic checkpoint interval")
    p.add_argument("--step-s", type=float, default=0.0, help="pause per step (demo pacing)")
    p.add_argument("--log", "--step-log", dest="log", type=Path,
                   help="directory for per-step JSON lines")
    p.add_argument("--pg-timeout", type=float,
                   help="seconds a collective or the process group's start may wait")
    p.add_argument("--sync-save", dest="async_save", action="store_false",
                   help="write periodic checkpoints in the training loop instead of in the "
                        "background (CheckpointManager.save_async)")
    p.add_argument("--sample-s", type=float, default=0.0,
                   help="compute stand-in: pause per local sample inside each step")
    p.add_argument("--events", type=Path, help="directory for per-process timing records")
    args = p.parse_args()
    events = EventLog(args.events)
    events.on_usr1()  # before run() attaches to the agent, which chains to it

    use_cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    x, y = synthetic_data(args.dataset, 16, args.seed)
    x, y = x.to(device), y.to(device)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    state = State(step=0, loss=float("nan"), model=model, optimizer=opt, scheduler=sched,
                  sampler=ElasticSampler(args.dataset, seed=args.seed))
    micro_sizes = [int(s) for s in args.micro_batches.split(",")]
    ckpt = None
    if args.ckpt is not None or memory_tier_available():
        ckpt = CheckpointManager(args.ckpt, keep=3)  # None: the memory tier only

    def save(why: str) -> None:
        # Periodic saves go on in the background from a copy; the last is
        # waited for, with any save in flight.
        t0 = time.time()
        background = why == "periodic" and args.async_save
        (ckpt.save_async if background else ckpt.save)(
            state.step, state.model, state.optimizer, state.scheduler,
            extra={"sampler": state.sampler.state_dict()})
        events("save", step=state.step, why=why, t0=t0, t1=time.time(), background=background)

    def train(world: World):
        events.begin(world.rank, world.size, world.generation, world.restart_count,
                     t0=T_START if world.rounds == 1 else world.t_round, t_pg=world.t_pg)
        if ckpt is not None and world.rounds == 1 and not world.received:
            # Nobody holds state: the job's (re)start. Every rank loads.
            loaded = ckpt.load(state.model, state.optimizer, state.scheduler)
            if loaded is not None:
                state.step = loaded["step"]
                state.sampler.load_state_dict(loaded["sampler"])
        plan = plan_batches(args.global_batch, world.size, micro_sizes)
        sampler = state.sampler
        sampler.set_world(world.rank, world.size, plan)
        ddp = DDP(state.model)  # over this round's process group
        events("init", t_load=world.t_pg, t1=time.time(), from_step=state.step)
        if world.rank == 0:
            how = "state from a peer" if world.received else f"round {world.rounds} of this process"
            print(f"[train] generation {world.generation}: world size {world.size}, from step "
                  f"{state.step} ({how}), {plan.describe()}", flush=True)
        log = None
        if args.log is not None:
            args.log.mkdir(parents=True, exist_ok=True)
            log = open(args.log / f"steps.rank{world.rank}.jsonl", "a", buffering=1)
        micro = plan.micro_batch(world.rank)
        try:
            while state.step < args.steps:
                t_step = time.time()
                if sampler.steps_left == 0:
                    sampler.set_epoch(sampler.epoch + 1)
                indices = sampler.step_indices()
                samples = sampler.next_step_samples
                lr = opt.param_groups[0]["lr"]
                opt.zero_grad()
                chunks = [indices[i:i + micro] for i in range(0, plan.accum_steps * micro, micro)]
                local_loss = torch.zeros((), device=device)
                for k, chunk in enumerate(chunks):
                    idx = torch.tensor(chunk, dtype=torch.long, device=device)
                    loss = ((ddp(x[idx]) - y[idx]) ** 2).sum() * world.size / samples
                    local_loss += loss.detach() / world.size
                    if k + 1 < len(chunks):
                        with ddp.no_sync():
                            loss.backward()
                        continue
                    dist.all_reduce(local_loss)
                    loss_value = state.loss = local_loss.item()
                    if log is not None:
                        log.write(json.dumps({"step": state.step + 1, "epoch": sampler.epoch,
                                              "gen": world.generation, "world": world.size,
                                              "global_batch": samples, "loss": loss_value,
                                              "lr": lr, "micro": micro, "indices": indices,
                                              "pid": os.getpid(), "t": time.time(),
                                              "params": params_digest(state.model)}) + "\n")
                    loss.backward()
                if args.sample_s:
                    with elasticrun.compute():  # timed for the straggler monitor
                        time.sleep(args.sample_s * len(indices))
                # The state changes only after the step's collectives: a
                # failure before this line leaves the last whole step.
                opt.step()
                sched.step()
                sampler.advance()
                state.step += 1
                events("step", step=state.step, t0=t_step, t1=time.time())
                elasticrun.step(state.step, loss=loss_value)
                if elasticrun.elastic_event_detected():
                    events("exit", t=time.time(), how="park")
                    return None  # resized: run() calls again in the next round
                if ckpt is not None and state.step % args.save_every == 0:
                    save("periodic")
                if args.step_s:
                    time.sleep(args.step_s)
            if args.ckpt is not None:
                # In the round: a failure during the last save is a round's
                # failure like any other, and the next round saves again.
                # (The memory tier ends with the job: no final save there.)
                save("final")
        except Exception as e:
            # run() decides: the round ended (park, go on) or the error is the script's.
            events("error", t=time.time(), what=f"{type(e).__name__}: {e}"[:300])
            raise
        finally:
            if log is not None:
                log.close()
        return state.loss

    timeout = datetime.timedelta(seconds=args.pg_timeout) if args.pg_timeout else None
    loss_value = run(train, state, timeout=timeout)
    if dist.get_rank() == 0:
        print(f"[train] done: {state.step} steps, loss {loss_value:.4f}", flush=True)
    dist.destroy_process_group()
    events("exit", t=time.time(), how="done")
    return 0


if __name__ == "__main__":
    code = main()
    # As train_elastic.py: no interpreter teardown after `import torch`.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
