"""What replicating the memory tier costs a training step.

Writes the "memory-replication" section of docs/benchmarks.md. From the
repository root, after a release build:

    cmake --preset release && cmake --build --preset release --target elasticrun
    OMP_NUM_THREADS=1 .venv/bin/python bench/replication_bench.py

A job of two elasticrun agents on this machine (127.0.0.1 and 127.0.0.2,
the rendezvous store embedded in the first), one FSDP2 rank each over
gloo, the state (parameters and Adam's moments) in the memory tier only
(CheckpointManager(None)), saved in the background every --save-every
steps. The two sides differ only in --memory-replicas: 0 (each node keeps
its own shards) against 1 (each agent also fetches the other's shards
into its tier while the job trains, CRC32C-checked, at most
--memory-replication-rate). The figure is the mean step time of rank 0
over the steps after the warm-up, saves included, as a median over runs,
the sides in alternating order; the agents' event logs give how much was
replicated, so a run that replicated nothing fails the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class BenchError(RuntimeError):
    pass


def worker(args) -> None:
    """One rank of the job (run by elasticrun)."""
    import elasticrun
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from elasticrun.checkpoint import CheckpointManager

    elasticrun.attach()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.hidden, args.hidden) for _ in range(args.layers)]
    model = torch.nn.Sequential(*layers)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    ckpt = CheckpointManager(None)
    x = torch.randn(args.batch, args.hidden, generator=torch.Generator().manual_seed(dist.get_rank()))
    times = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if step % args.save_every == 0:
            ckpt.save_async(step, model, opt)
        times.append(time.perf_counter() - t0)
    ckpt.wait()
    if dist.get_rank() == 0:
        args.out.write_text(json.dumps(times))
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(args, replicas: int, run: int, work: Path) -> tuple[float, int, list[float]]:
    """Mean step time after the warm-up (s), bytes replicated, and each
    replication's seconds."""
    port = free_port()
    out = work / f"times-{run}-{replicas}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "python")}
    procs, logs = [], []
    for node in (1, 2):
        log = work / f"events-{run}-{replicas}-{node}.jsonl"
        logs.append(log)
        argv = [args.elasticrun, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"repl-{run}-{replicas}",
                "--local-addr", f"127.0.0.{node}", "--memory-replicas", str(replicas),
                "--memory-replication-rate", args.rate, "--event-log", str(log),
                "--no-python", args.python, __file__, "--worker",
                "--out", str(out), "--hidden", str(args.hidden), "--layers", str(args.layers),
                "--batch", str(args.batch), "--steps", str(args.steps),
                "--save-every", str(args.save_every)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(work / f"agent-{run}-{replicas}-{node}.log", "w")))
    for p in procs:
        if p.wait(timeout=args.timeout) != 0:
            raise BenchError(f"an agent exited {p.returncode}; see {work}")
    times = json.loads(out.read_text())[args.warmup:]
    nbytes, fetches = 0, []
    for log in logs:
        for line in log.read_text().splitlines():
            e = json.loads(line)
            if e.get("event") == "memory_replicate":
                nbytes += e["bytes"]
                fetches.append(e["seconds"])
    if replicas > 0 and not fetches:
        raise BenchError(f"run {run}: nothing was replicated; see {work}")
    return statistics.fmean(times), nbytes, fetches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--rate", default="1G", help="--memory-replication-rate")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--elasticrun", default=str(ROOT / "build/release/elasticrun"))
    ap.add_argument("--python", default=str(ROOT / ".venv/bin/python"))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--output", type=Path, default=ROOT / "docs/benchmarks.md")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    if not os.access(args.elasticrun, os.X_OK):
        ap.error(f"{args.elasticrun} is not an executable; build elasticrun (release)")
    import torch

    params = args.layers * (args.hidden * args.hidden + args.hidden)
    state_mib = 3 * 4 * params / 2**20  # weights and Adam's two moments, float32
    work = ROOT / "build" / f"replication_bench-{os.getpid()}"
    work.mkdir(parents=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = os.getloadavg()
    res: dict[int, list[float]] = {0: [], 1: []}
    replicated: list[tuple[int, int]] = []
    fetch_s: list[float] = []
    try:
        for i in range(args.runs):
            for replicas in ((0, 1) if i % 2 == 0 else (1, 0)):
                mean, nbytes, fetches = one_run(args, replicas, i, work)
                res[replicas].append(mean)
                if replicas:
                    replicated.append((nbytes, len(fetches)))
                    fetch_s += fetches
            print(f"run {i + 1}: off {res[0][-1] * 1e3:.1f} ms, on {res[1][-1] * 1e3:.1f} ms "
                  f"({replicated[-1][1]} snapshots, {replicated[-1][0] / 2**20:.0f} MiB "
                  f"replicated)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()
    off, on = statistics.median(res[0]), statistics.median(res[1])
    saves = args.steps // args.save_every
    per_run = statistics.median(n for n, _ in replicated)
    per_fetch = statistics.median(fetch_s)
    shard_mib = per_run / statistics.median(c for _, c in replicated) / 2**20
    body = f"""# Replicating the memory tier: its cost to a training step

Generated by `bench/replication_bench.py` on {started}; medians of {args.runs} runs; source: {source_state()}.

Reproduce (from the repository root):

```sh
cmake --preset release && cmake --build --preset release --target elasticrun
OMP_NUM_THREADS=1 .venv/bin/python bench/replication_bench.py --runs {args.runs}
```

- Machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.platform()}; load average {' / '.join(f'{x:.2f}' for x in load_start)} at start, {' / '.join(f'{x:.2f}' for x in load_end)} at end; PyTorch {torch.__version__}
- Job: two elasticrun agents on this machine, one FSDP2 rank each over gloo; {args.layers} linear layers of {args.hidden}, batch {args.batch}; the state {state_mib:,.0f} MiB (weights and Adam's moments), half of it each rank's shards; saved to the memory tier in the background every {args.save_every} steps ({saves} saves in {args.steps} steps); mean step time of rank 0 after {args.warmup} warm-up steps, saves included
- Replication: each agent fetched the other's shards of each save, CRC32C-checked, at most --memory-replication-rate {args.rate} (bytes a second, powers of 1024): {per_run / 2**20:,.0f} MiB a run, {shard_mib:,.0f} MiB a fetch in {per_fetch * 1e3:.0f} ms (median)

Target (the memory-tier issue): replication adds under 3% to the step time.

| | mean step time | / without |
|---|---:|---:|
| `--memory-replicas 0` | {off * 1e3:.1f} ms | 1.000 |
| `--memory-replicas 1` | {on * 1e3:.1f} ms | **{on / off:.3f}** |

Runs (ms): without {', '.join(f'{x * 1e3:.1f}' for x in res[0])}; with {', '.join(f'{x * 1e3:.1f}' for x in res[1])}.

## Method, and what to keep in mind

- Both ranks and both agents share this machine's {os.cpu_count()} CPUs, so the
  replication's work (the copy over loopback, the checksums, the fresh
  pages of /dev/shm) takes CPU time from the training itself; on a GPU
  node the training runs on the GPUs and the copy goes over the network
  instead, capped by `--memory-replication-rate` so that it leaves the
  bandwidth to the collectives.
- What the replication costs here is mostly CPU: each save, each node
  checksums its new shards (the manifest), sends them, and receives,
  checksums and writes the other's ({shard_mib:,.0f} MiB, {per_fetch * 1e3:.0f} ms a fetch)
  into fresh tmpfs pages, which this virtual machine hands out slowly
  (docs/benchmarks.md, "memory-tier"). With two training ranks on two
  CPUs, that time comes out of the steps around each save.
- Both sides save the same snapshots (the copy out of the tensors in the
  step, the write in the background); only the fetch by the peer differs.
"""
    write_section(args.output, "memory-replication", body)
    print(f"off {off * 1e3:.1f} ms, on {on * 1e3:.1f} ms: {on / off:.3f}; "
          f"written to {args.output}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"replication_bench: {e}", file=sys.stderr)
        sys.exit(1)
