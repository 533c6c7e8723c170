"""Checks `elasticctl plan`'s memory model against the measured peak of real
training on CPU (docs/planner.md, "Validation against measured peaks").

A small Llama-like decoder (RMSNorm, GQA attention through SDPA, RoPE,
SwiGLU, untied head, fp32, AdamW) trains 3 optimizer steps of 2 micro-batches
each over a grid of micro-batch x sequence length x activation checkpointing,
under DDP (one gloo process) and FSDP2 (two gloo processes). For each point
the script runs `elasticctl plan --json` with the same shape and prints
measured vs planned with the ratio.

How the peak is measured: each rank replaces PyTorch's CPU allocator with
bench/cpu_peak_allocator.cpp, the default allocator plus a count of the
bytes of live tensors, allocated or freed on any thread, and its maximum.
The model and the optimizer are built inside the measured window, so the
maximum less the bytes live when it opened is the peak: what
torch.cuda.max_memory_allocated() reports on a GPU. Neither max RSS (glibc
keeps freed memory, large tensors come and go as mmaps, the interpreter and
torch's libraries are in it) nor torch.profiler's memory events would do:
the profiler records a free only on a thread it profiles, and gloo frees
the tensors a collective holds (an all-gather's output, the copy a
reduce-scatter makes of its input) on its worker threads, so a running sum
of its events never sees them go, and overstated FSDP2's peaks here by
14 to 56 MiB. The allocator's caching and fragmentation on a GPU (reserved
minus allocated) are not in either number; that is what --margin is for.

Two micro-batches per step, so the gradients of the first are resident
during the second's backward, as the planner assumes. This is a benchmark,
not a test: it takes a few minutes on 2 CPUs.

    .venv/bin/python bench/planner_validate.py [--elasticctl build/dev/elasticctl]
        [--no-fsdp] [--write-docs]

It builds bench/cpu_peak_allocator.cpp with torch.utils.cpp_extension (a
C++ compiler; seconds) into build/planner_validate/.
"""

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

SHAPE = dict(layers=4, hidden=256, heads=4, kv_heads=2, ffn_hidden=688, vocab=8192)
GRID = [(b, s, ac) for ac in ("none", "full") for s in (128, 512) for b in (1, 4)]
ACCUM = 2
STEPS = 3


def build_model(torch, nn, F):
    h, a, kv, f, v = (SHAPE[k] for k in ("hidden", "heads", "kv_heads", "ffn_hidden", "vocab"))
    hd = h // a

    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.RMSNorm(h)
            self.wq = nn.Linear(h, h, bias=False)
            self.wk = nn.Linear(h, kv * hd, bias=False)
            self.wv = nn.Linear(h, kv * hd, bias=False)
            self.wo = nn.Linear(h, h, bias=False)
            self.mlp_norm = nn.RMSNorm(h)
            self.w1 = nn.Linear(h, f, bias=False)
            self.w3 = nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            y = self.attn_norm(x)
            q = self.wq(y).view(b, t, a, hd).transpose(1, 2)
            k = self.wk(y).view(b, t, kv, hd).transpose(1, 2)
            val = self.wv(y).view(b, t, kv, hd).transpose(1, 2)
            o = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), val,
                                               is_causal=True, enable_gqa=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, t, h))
            y = self.mlp_norm(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(v, h)
            self.layers = nn.ModuleList(Block() for _ in range(SHAPE["layers"]))
            self.norm = nn.RMSNorm(h)
            self.head = nn.Linear(h, v, bias=False)
            self.checkpointing = False

        def forward(self, tokens, targets):
            t = tokens.shape[1]
            pos = torch.arange(t, dtype=torch.float32)[:, None]
            freq = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            angles = torch.cat((pos * freq, pos * freq), dim=-1)
            cos, sin = angles.cos(), angles.sin()
            x = self.embed(tokens)
            for layer in self.layers:
                if self.checkpointing:
                    x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
                else:
                    x = layer(x, cos, sin)
            logits = self.head(self.norm(x))
            # As torchtitan does: the loss over fp32 logits (a no-op cast in fp32).
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    return Decoder()


def build_allocator() -> Path:
    """Compiles the counting allocator; returns the shared library's path."""
    from torch.utils import cpp_extension
    out = ROOT / "build/planner_validate"
    out.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name="cpu_peak_allocator",
                       sources=[str(ROOT / "bench/cpu_peak_allocator.cpp")],
                       build_directory=str(out), is_python_module=False, extra_cflags=["-O2"])
    return out / "cpu_peak_allocator.so"


def install_allocator(library: str):
    """Makes the counting allocator PyTorch's CPU allocator in this process."""
    import torch  # noqa: F401  (loads libc10, which the library links)
    lib = ctypes.CDLL(library)
    for name in ("elasticrun_cpu_live_bytes", "elasticrun_cpu_peak_bytes"):
        getattr(lib, name).restype = ctypes.c_int64
    if lib.elasticrun_cpu_install() != 1:
        raise SystemExit("another CPU allocator of higher priority is registered; "
                         "the counts would miss every allocation")
    return lib


def measure(sharding: str, world: int, rank: int, counter):
    """Every grid point at this rank; returns {(batch, seq, ac): peak bytes}."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    out = {}
    for batch, seq, ac in GRID:
        gen = torch.Generator().manual_seed(rank)
        data = [torch.randint(0, SHAPE["vocab"], (batch, seq + 1), generator=gen)
                for _ in range(STEPS * ACCUM)]
        # The last point's model may sit in reference cycles (FSDP's hooks):
        # free it now, not inside this point's window.
        gc.collect()
        dist.barrier()
        before = counter.elasticrun_cpu_live_bytes()
        counter.elasticrun_cpu_reset_peak()
        model = build_model(torch, nn, F)
        model.checkpointing = ac == "full"
        if sharding == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard
            fully_shard(model.embed)
            for layer in model.layers:
                fully_shard(layer)
            fully_shard([model.norm, model.head])
            fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        for step in range(STEPS):
            for micro in range(ACCUM):
                tokens = data[step * ACCUM + micro]
                (model(tokens[:, :-1], tokens[:, 1:]) / ACCUM).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        del model, opt
        out[(batch, seq, ac)] = counter.elasticrun_cpu_peak_bytes() - before
        dist.barrier()
    return out


def rank_main(sharding: str, world: int, rank: int, port: int, result: str,
              library: str) -> None:
    # Before the process group and the models exist.
    counter = install_allocator(library)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    peaks = measure(sharding, world, rank, counter)
    Path(f"{result}.{rank}").write_text(json.dumps([[list(k), v] for k, v in peaks.items()]))
    dist.destroy_process_group()


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(sharding: str, world: int, library: Path):
    """The peak at each grid point: the largest over the ranks."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "peaks.json")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", sharding, str(world),
                                   str(r), str(port), result, str(library)])
                 for r in range(world)]
        if any(p.wait() != 0 for p in procs):
            raise SystemExit(f"{sharding} ranks failed")
        peaks = {}
        for r in range(world):
            for k, v in json.loads(Path(f"{result}.{r}").read_text()):
                peaks[tuple(k)] = max(v, peaks.get(tuple(k), 0))
        return peaks


def planned(elasticctl: str, sharding: str, world: int, batch: int, seq: int, ac: str):
    cmd = [elasticctl, "plan", "--seq-len", str(seq), "--precision", "fp32",
           "--sharding", sharding, "--activation-checkpointing", ac, "--gpu-memory", "1024",
           "--world-sizes", str(world), "--micro-batch", str(batch), "--json"]
    for k, v in SHAPE.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return out["sizes"][0]["peak_bytes"], cmd


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        sharding, world, rank, port, result, library = sys.argv[2:8]
        rank_main(sharding, int(world), int(rank), int(port), result, library)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elasticctl", default=str(ROOT / "build/dev/elasticctl"))
    ap.add_argument("--no-fsdp", action="store_true", help="DDP only")
    ap.add_argument("--write-docs", action="store_true",
                    help="replace the planner section of docs/benchmarks.md")
    args = ap.parse_args()

    import torch
    library = build_allocator()
    runs = [("ddp", 1)] + ([] if args.no_fsdp else [("fsdp", 2)])
    mib = 1024.0 * 1024
    rows, example = [], None
    for sharding, world in runs:
        peaks = run_world(sharding, world, library)
        for batch, seq, ac in GRID:
            plan, cmd = planned(args.elasticctl, sharding, world, batch, seq, ac)
            example = example or cmd
            measured = peaks[(batch, seq, ac)]
            rows.append(f"| {sharding} x{world} | {batch} | {seq} | {ac} | "
                        f"{measured / mib:.1f} | {plan['total'] / mib:.1f} | "
                        f"{plan['total'] / measured:.2f} | "
                        f"{plan['weights'] / mib:.1f} / {plan['gradients'] / mib:.1f} / "
                        f"{plan['optimizer'] / mib:.1f} / {plan['activations'] / mib:.1f} / "
                        f"{plan['temporaries'] / mib:.1f} |")
    shape = ", ".join(f"{k} {v}" for k, v in SHAPE.items())
    table = "\n".join([
        f"Model: {shape}; fp32, AdamW, {ACCUM} micro-batches a step, {STEPS} steps; "
        f"PyTorch {torch.__version__}, CPU, gloo.",
        "",
        "| sharding | micro-batch | seq | checkpointing | measured MiB | planned MiB | "
        "planned / measured | planned weights / grads / optim / activ / temps MiB |",
        "|---|---:|---:|---|---:|---:|---:|---|",
        *rows,
    ])
    print(table)
    print("\nplanned with, e.g.:", " ".join(example[1:]) if example else "")
    if args.write_docs:
        from report_sections import write_section
        body = "\n".join([
            "# Memory planner: `elasticctl plan` vs measured peaks",
            "",
            "Generated by `bench/planner_validate.py` on a 2-CPU machine (docs/planner.md "
            "explains the terms, the measurement and the differences). Peaks are the most "
            "bytes of live tensors at once, counted by a CPU allocator that sees allocations "
            "and frees on every thread (`bench/cpu_peak_allocator.cpp`: the CPU twin of "
            "`torch.cuda.max_memory_allocated()`), the largest over the ranks.",
            "",
            "Reproduce (from the repository root):",
            "",
            "```sh",
            "cmake --build --preset dev --target elasticctl",
            ".venv/bin/python bench/planner_validate.py --write-docs",
            "```",
            "",
            table,
        ])
        write_section(ROOT / "docs/benchmarks.md", "planner", body)


if __name__ == "__main__":
    main()
