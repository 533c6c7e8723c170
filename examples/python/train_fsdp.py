"""A small transformer trained with FSDP2, elastic, its micro-batch planned
for memory.

The model is a Llama-shaped decoder (RMSNorm, causal self-attention, a
SwiGLU MLP, untied embedding and head; no positional encoding, which the
causal mask makes up for on this task) sharded with FSDP2
(torch.distributed.fsdp.fully_shard: each block, then the whole model) over
gloo on CPU, or NCCL on GPUs. It learns synthetic sequences in which each
token is the one before plus a step that differs per sequence.

The global batch stays the same at every world size. How each rank splits
it comes from the job config's worldSizeOverrides (docs/job-config.md),
which `elasticctl plan --emit-config` writes from the model's shape
(docs/planner.md): at each node count the largest micro-batch that fits
(maxMicroBatchSize), within which the SDK's plan_batches picks each rank's
micro-batch and the accumulation steps, uneven if it must:

    elasticctl plan --layers 2 --hidden 64 --heads 4 --ffn-hidden 128 --vocab 64 \\
        --seq-len 32 --precision fp32 --sharding fsdp --gpu-memory 0.003 \\
        --global-batch 20 --world-sizes 2:4 --gpus-per-node 1 --emit-config job.yaml
    elasticrun --nnodes 2:4 --nproc-per-node 1 --rdzv-backend c10d \\
        --rdzv-endpoint host:29400 --rdzv-id fsdp --config job.yaml \\
        train_fsdp.py --ckpt /shared/ckpt

(On CPU --gpu-memory is only a stand-in: 3 MiB keeps the ranges small
enough at this model's size to differ by size, 4 sequences at 2 nodes
and 5 at 3 and 4, which the SDK splits as 3 + 2 in 4 accumulation steps,
4 + 3 + 3 in 2 and 5 + 5 + 5 + 5 in 1.)

At each (re)start the entry for the node count the job runs on applies; a
size without one trains with --micro-batches. The checkpoints are
CheckpointManager's DCP checkpoints (and, under elasticrun, the memory
tier's): every rank writes its own shards, and a job restarted at another
world size loads them resharded. The sampler's position is in the
checkpoint, so every sample of an epoch is used once across resizes. When
elasticrun resizes the job, every rank stops at the step they agreed on,
saves and leaves; the agents start it again at the new size.

It runs unchanged under torchrun, at a fixed size; --config FILE then reads
the overrides that elasticrun would pass in $ELASTICRUN_CONFIG_FILE (keyed
by nodes: one node of 2 ranks here, planned with --world-sizes 1
--gpus-per-node 2):

    torchrun --standalone --nproc-per-node 2 train_fsdp.py --config job1.yaml

With --step-log DIR each rank appends one JSON line per step to
DIR/steps.rank<R>.jsonl (the step, epoch, generation, world size, its
sample indices, its micro-batch, the accumulation steps, the loss), and
rank 0 appends to DIR/state.jsonl a digest of the whole state (every
parameter and optimizer tensor gathered) after each load and at each save,
so a test can tell that a restart continued from exactly what was saved.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import elasticrun
from elasticrun.batch import load_overrides, micro_batch_sizes, plan_batches
from elasticrun.checkpoint import CheckpointManager
from elasticrun.sampler import ElasticSampler


class Block(nn.Module):
    """One decoder layer as the planner counts it (docs/planner.md): q, k, v
    and o projections, a SwiGLU MLP, two RMSNorms."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.RMSNorm(hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Linear(hidden, hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = nn.RMSNorm(hidden)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        y = self.attn_norm(x)
        q, k, v = (proj(y).view(b, s, self.heads, h // self.heads).transpose(1, 2)
                   for proj in (self.q, self.k, self.v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, h))
        y = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Decoder(nn.Module):
    def __init__(self, vocab: int, hidden: int, heads: int, ffn: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def synthetic_sequences(n: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """n sequences of length + 1 tokens, each token the one before plus the
    sequence's own step (1 to 3), modulo the vocabulary; the same on every
    rank."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    step = torch.randint(1, 4, (n, 1), generator=g)
    return (start + step * torch.arange(length + 1)) % vocab


def state_digest(model: nn.Module, opt: torch.optim.Optimizer) -> str:
    """SHA-256 over every parameter and optimizer state tensor, gathered
    whole, in name order. A collective: every rank calls it."""
    h = hashlib.sha256()

    def add(name: str, t: torch.Tensor) -> None:
        whole = t.full_tensor() if hasattr(t, "full_tensor") else t
        h.update(name.encode())
        h.update(whole.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())

    for name, p in model.named_parameters():
        add(name, p)
        for key, value in sorted(opt.state.get(p, {}).items()):
            add(f"{name}/{key}", value)
    return h.hexdigest()


def leave(code: int) -> None:
    """Exits without the interpreter's teardown, which takes seconds after
    `import torch`: time the next round waits for. Checkpoints are
    published and fsynced before this; the logs are line-buffered."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", type=Path,
                   help="checkpoint directory shared by all nodes; without one, under elasticrun, "
                        "the state is kept in the nodes' memory tier only")
    p.add_argument("--config", type=Path,
                   help="job config whose worldSizeOverrides apply (default: "
                        "$ELASTICRUN_CONFIG_FILE, which elasticrun --config sets)")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps in all")
    p.add_argument("--global-batch", type=int, default=20, help="sequences per optimizer step")
    p.add_argument("--micro-batches", default="1,2,3,4",
                   help="allowed micro-batch sizes where the config has no entry")
    p.add_argument("--dataset", type=int, default=200, help="sequences per epoch")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--save-every", type=int, default=0,
                   help="periodic checkpoint interval, in the background (0: none)")
    p.add_argument("--step-s", type=float, default=0.0, help="pause per step (pacing)")
    p.add_argument("--step-log", type=Path, help="directory for per-step JSON lines")
    args = p.parse_args()

    elasticrun.attach()  # SIGUSR1 and the control block, under elasticrun
    use_cuda = torch.cuda.is_available()
    # Two minutes, not PyTorch's ten: a collective left waiting by a peer that
    # is gone ends the attempt sooner (elasticrun also releases it, see attach).
    dist.init_process_group("nccl" if use_cuda else "gloo",
                            timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    generation = int(os.environ.get("ELASTICRUN_GENERATION", "0"))

    # The same initial weights on every rank; fully_shard keeps each rank's rows.
    torch.manual_seed(args.seed)
    model = Decoder(args.vocab, args.hidden, args.heads, args.ffn_hidden, args.layers).to(device)
    mesh = init_device_mesh(device.type, (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = synthetic_sequences(args.dataset, args.seq_len, args.vocab, args.seed).to(device)

    # worldSizeOverrides are keyed by nodes, not ranks (docs/job-config.md).
    nodes = int(os.environ.get("GROUP_WORLD_SIZE")
                or world // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    override = load_overrides(args.config).get(nodes, {})
    sizes = micro_batch_sizes(override, [int(s) for s in args.micro_batches.split(",")])
    plan = plan_batches(args.global_batch, world, sizes)
    sampler = ElasticSampler(args.dataset, seed=args.seed, drop_last=True)
    ckpt = CheckpointManager(args.ckpt)
    state = ckpt.load(model, opt)
    step = 0
    if state is not None:
        step = state["step"]
        sampler.load_state_dict(state["sampler"])
    # After the load: the checkpoint holds the learning rate of the size it was saved at.
    for group in opt.param_groups:
        group["lr"] = override.get("learningRate", args.lr)
    sampler.set_world(rank, world, plan)

    log = states = None
    if args.step_log is not None:
        args.step_log.mkdir(parents=True, exist_ok=True)
        log = open(args.step_log / f"steps.rank{rank}.jsonl", "a", buffering=1)
        states = open(args.step_log / "state.jsonl", "a", buffering=1) if rank == 0 else None

    def record_state(what: str) -> None:
        if args.step_log is None:
            return
        digest = state_digest(model, opt)
        if states is not None:
            states.write(json.dumps({"what": what, "step": step, "gen": generation,
                                     "world": world, "digest": digest}) + "\n")

    def save(why: str) -> None:
        record_state("saved")
        ckpt.save(step, model, opt, extra={"sampler": sampler.state_dict(), "why": why})

    record_state("loaded")
    if rank == 0:
        given = ", ".join(f"{k} {v}" for k, v in sorted(override.items())) or "none"
        print(f"[fsdp] generation {generation}: world size {world} on {nodes} node"
              f"{'s' if nodes != 1 else ''}, from step {step}, override: {given}; "
              f"{plan.describe()}", flush=True)

    micro = plan.micro_batch(rank)
    loss_value = float("nan")
    while step < args.steps:
        if sampler.steps_left == 0:
            sampler.set_epoch(sampler.epoch + 1)
        indices = sampler.step_indices()
        samples = sampler.next_step_samples
        tokens = samples * args.seq_len
        opt.zero_grad()
        local = torch.zeros((), device=device)
        for k in range(plan.accum_steps):
            # FSDP2 reduce-scatters each backward unless told not to: only
            # the last micro-batch's does, the others accumulate locally.
            model.set_requires_gradient_sync(k + 1 == plan.accum_steps)
            seq = data[torch.tensor(indices[k * micro:(k + 1) * micro], device=device)]
            logits = model(seq[:, :-1])
            summed = F.cross_entropy(logits.float().reshape(-1, args.vocab), seq[:, 1:].reshape(-1),
                                     reduction="sum")
            # The reduce-scatter averages over ranks, whose micro-batches may
            # differ: scaled so the average is the mean over the step's tokens.
            (summed * world / tokens).backward()
            local += summed.detach()
        opt.step()
        dist.all_reduce(local)
        loss_value = local.item() / tokens
        sampler.advance()
        step += 1
        if log is not None:
            log.write(json.dumps({"step": step, "epoch": sampler.epoch, "gen": generation,
                                  "world": world, "global_batch": samples, "loss": loss_value,
                                  "micro": micro, "accum": plan.accum_steps,
                                  "indices": indices}) + "\n")
        elasticrun.step(step, loss=loss_value)
        if elasticrun.elastic_event_detected():
            # Every rank gets here at the same step: save and go; the agents
            # start the job again at its new size from this checkpoint.
            elasticrun.stopped()
            save("resize")
            elasticrun.saved()
            if rank == 0:
                print(f"[fsdp] stopped at step {step} for a resize; checkpoint saved", flush=True)
            leave(0)  # the next round waits for this process to be gone
        if args.save_every and step % args.save_every == 0:
            ckpt.save_async(step, model, opt, extra={"sampler": sampler.state_dict()})
        if args.step_s:
            time.sleep(args.step_s)
    save("final")
    if rank == 0:
        print(f"[fsdp] done: {step} steps, loss {loss_value:.4f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    leave(main())
