#!/usr/bin/env python3
"""gloo's process-group start at 2..64 ranks on this machine, over
PyTorch's TCPStore and over elasticrun's store.

A worker's `init_process_group("gloo")` in a new round is: connect to the
round's store (MASTER_ADDR:MASTER_PORT), then gloo's full mesh, each rank
publishing its address in the store and reading every other rank's, and a
first collective. What elasticrun adds to that is the store: each round's
worker store is served by an agent (the same server as `elasticctl
store`), where torchrun's agents serve PyTorch's TCPStore. This measures
both, side by side, with the same ranks:

    .venv/bin/python bench/gloo_init_bench.py --elasticctl build/release/elasticctl

Each run: the store in a process of its own (PyTorch's TCPStore as its
master, or `elasticctl store`), N ranks forked from this process after
`import torch` (so no rank pays for an interpreter), each waiting for one
start signal; then each connects a TCPStore client, makes a
ProcessGroupGloo under a fresh prefix (as a new round would) and
all-reduces one tensor. The figure is from the signal to the last rank's
all-reduce done (time.monotonic(), the same clock in every process), the
median of --runs runs per size and store.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from report_sections import write_section  # noqa: E402
from scaleup_bench import BenchError, Procs, start_store  # noqa: E402

import torch  # noqa: E402  (before the ranks fork: none imports it again)
import torch.distributed as dist  # noqa: E402

SIZES = [2, 4, 8, 16, 32, 64]
TIMEOUT = datetime.timedelta(seconds=120)

TORCH_STORE = """
import datetime, sys, time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  timeout=datetime.timedelta(seconds=120))
print(f"listening on 127.0.0.1:{s.port}", flush=True)
time.sleep(1e9)
"""


def rank_main(rank: int, n: int, port: int, prefix: str, go, out) -> None:
    go.wait()
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)
        pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, n, TIMEOUT)
        t_pg = time.monotonic()
        pg.allreduce([torch.ones(1)]).wait()
        out.put((rank, t_pg, time.monotonic(), None))
    except Exception as e:  # reported, and the run counts as failed
        out.put((rank, 0.0, 0.0, f"{type(e).__name__}: {e}"))
    os._exit(0)


def one_run(n: int, port: int, prefix: str) -> tuple[float, float]:
    """(seconds to every rank's process group, to every rank's first
    all-reduce) from the start signal."""
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.SimpleQueue()  # put() writes at once: the ranks _exit
    ranks = [ctx.Process(target=rank_main, args=(r, n, port, prefix, go, out)) for r in range(n)]
    for p in ranks:
        p.start()
    time.sleep(0.2)  # every rank forked and waiting
    t0 = time.monotonic()
    go.set()
    got: list = []
    deadline = time.monotonic() + TIMEOUT.total_seconds()
    while len(got) < n:  # every rank puts, error or not, unless it crashed
        if not out.empty():
            got.append(out.get())
        elif time.monotonic() > deadline or not any(p.is_alive() for p in ranks):
            for p in ranks:
                p.kill()
            raise BenchError(f"{n} ranks: {n - len(got)} never reported")
        else:
            time.sleep(0.005)
    for p in ranks:
        p.join(30)
    errors = [e for *_, e in got if e]
    if errors:
        raise BenchError(f"{n} ranks: {errors[0]}")
    return max(g[1] for g in got) - t0, max(g[2] for g in got) - t0


def stalls(med: dict, sizes: list[int]) -> str:
    out = []
    for store, name in (("torch", "PyTorch's TCPStore"), ("elasticrun", "elasticrun's store")):
        slow = [f"{n} ranks ({med[(store, n)][1]:.1f} s)" for n in sizes if med[(store, n)][1] > 1]
        out.append(f"{name}: {', '.join(slow) if slow else 'none'}")
    return "; ".join(out)


def start_torch_store(procs: Procs, env: dict) -> int:
    p = procs.start("torch-store", [sys.executable, "-c", TORCH_STORE], env)
    deadline = time.time() + 60
    while time.time() < deadline:
        for line in procs.log("torch-store").splitlines():
            if "listening on 127.0.0.1:" in line:
                return int(line.rsplit(":", 1)[1])
        if p.poll() is not None:
            raise BenchError("the TCPStore process exited:\n" + procs.log("torch-store"))
        time.sleep(0.05)
    raise BenchError("the TCPStore process did not report its port")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elasticctl", default=str(ROOT / "build/release/elasticctl"))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "build/gloo-init")
    ap.add_argument("--report", type=Path, default=ROOT / "docs/benchmarks.md")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # Each rank holds a socket to every other one, and the store one per rank.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="WARNING")
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    procs = Procs(args.out)
    stamp = datetime.datetime.now(datetime.timezone.utc)
    load_start = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        ports = {"torch": start_torch_store(procs, env),
                 "elasticrun": start_store(procs, args.elasticctl, env)}
        for i in range(args.runs):
            for n in sizes:
                for store, port in ports.items():  # taking turns
                    t = one_run(n, port, f"run{i}/{store}/{n}/")
                    results.setdefault((store, n), []).append(t)
                    print(f"[gloo-init] {store} store, {n} ranks, run {i + 1}: process group "
                          f"{t[0] * 1000:.0f} ms, first all-reduce {t[1] * 1000:.0f} ms",
                          flush=True)
    finally:
        procs.stop_all(args.out / "no-markers")
    med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v))
           for k, v in results.items()}
    lines = ["| ranks | PyTorch's TCPStore: process group | first all-reduce | elasticrun's store: "
             "process group | first all-reduce | elasticrun / PyTorch (all-reduce) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for n in sizes:
        (tp, ta), (ep, ea) = med[("torch", n)], med[("elasticrun", n)]
        lines.append(f"| {n} | {tp * 1000:.0f} ms | {ta * 1000:.0f} ms | {ep * 1000:.0f} ms | "
                     f"{ea * 1000:.0f} ms | {ea / ta:.2f}x |")
    table = "\n".join(lines)
    print(table)
    body = "\n".join([
        "# gloo's process-group start at 2..64 ranks: elasticrun's store vs PyTorch's TCPStore",
        "",
        f"Generated by `bench/gloo_init_bench.py` on {stamp:%Y-%m-%d %H:%M} UTC; medians of "
        f"{args.runs} runs per size and store, taking turns.",
        "",
        "Reproduce: `.venv/bin/python bench/gloo_init_bench.py --elasticctl build/release/elasticctl`",
        "",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}; load average {load_start} at "
        f"start, {' / '.join(f'{x:.2f}' for x in os.getloadavg())} at end; PyTorch "
        f"{torch.__version__}",
        "- Each run: N ranks forked after `import torch`, released at once; each connects a "
        "TCPStore client to the store, makes a ProcessGroupGloo under a fresh prefix (a new "
        "round's) and all-reduces one tensor. From the release to the last rank's process group, "
        "and to its all-reduce done. The store runs in a process of its own: PyTorch's TCPStore "
        "as master, or `elasticctl store` (the server an agent runs as each round's worker store).",
        "",
        table,
        "",
        "- What elasticrun adds to gloo's start is the store it serves: the ratio column. The "
        "rest is gloo's full mesh (each rank connects to every other one, N x (N - 1) store "
        "reads of the peers' addresses) and, on this 2-CPU machine, N processes sharing two "
        "cores.",
        f"- Sizes where a start took more than a second: {stalls(med, sizes)}. A start that "
        "jumps by whole seconds from one size to the next is waiting on a retry (a connection "
        "refused or dropped and tried again later), not on work; one that both stores show at "
        "the same size is not the store's.",
        "- An in-process re-formation pays exactly this (no interpreter, no import) plus the "
        "state's broadcast; the churn section with `--inprocess` splits the two per event.",
    ])
    if not args.no_report:
        write_section(args.report, "gloo-init", body)
        print(f"report: {args.report} (section 'gloo-init')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
