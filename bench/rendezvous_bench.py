#!/usr/bin/env python3
"""Rendezvous time: our Rendezvous::join() against PyTorch's DynamicRendezvousHandler.

Run from the repository root with the project's virtualenv (it needs torch),
after building the load generator:

    cmake --preset release && cmake --build --preset release --target rendezvous_loadgen
    .venv/bin/python bench/rendezvous_bench.py            # ~20 minutes, writes docs/benchmarks.md
    .venv/bin/python bench/rendezvous_bench.py --quick    # 16 and 64 agents, 1 run, no report

What is timed, on both sides: N agents, each with its own store connection
made before the clock starts; the clock starts when a start barrier releases
them all and stops when the last agent's rendezvous call has returned.
min = max = N (a fixed-size job), so neither side waits out a last-call
window: both close the round when the N-th agent arrives.

- Ours: bench/rendezvous_loadgen, N threads in one process calling the
  library's Rendezvous::join() against an in-process `store::Server`.
- PyTorch: N DynamicRendezvousHandlers over C10dRendezvousBackend, each on a
  TCPStore client of its own, calling next_rendezvous(), against a TCPStore
  server (libuv) in a process of its own. Two modes: one process per agent
  (forked from one that imported torch; up to --torch-max-processes, for
  memory) and one thread per agent in a single process (GIL included).
  Keep-alive is set to an hour so that no keep-alive write competes with
  the joins; rank 0's extra TCPStore for the workers is turned off
  (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), because our join does not create
  one either.

Each size runs --repeats times per side, one side at a time (ours first),
each side in a process of its own. A PyTorch run that takes longer than
--torch-timeout is abandoned (its processes are killed) and larger sizes
are not attempted in that mode; the report says so.
"""

from __future__ import annotations

import sys as _sys
_sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402

import argparse
import ctypes
import datetime
import json
import os
import platform
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1

# The PyTorch side, run as `python FILE MODE N REPEATS` (the harness writes
# TORCH_AGENTS to FILE; not `python -c`: the handler calls inspect.stack()
# for every event it records, and frames without a source file make that
# several times slower than it is in torchrun) with MODE
# "threads" (N Python threads in this process) or "processes" (N processes
# forked from this one once it has imported torch). The TCPStore server is a
# forked process of its own in both modes, started before any thread exists.
# Prints one JSON line per run, like the loadgen.
TORCH_AGENTS = r"""
import ctypes, json, os, resource, signal, sys, threading, time
from datetime import timedelta
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
import torch
import torch.distributed as dist
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler, RendezvousTimeout)

mode, n, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TICK = os.sysconf("SC_CLK_TCK")

def cpu_of(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime + stime

r, w = os.pipe()
die_with_parent = lambda: ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
srv = os.fork()
if srv == 0:
    die_with_parent()
    os.close(r)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False)
    os.write(w, f"{master.port}\n".encode())
    os.close(w)
    while True:
        signal.pause()
os.close(w)
port = int(os.read(r, 64).decode())
os.close(r)
print(f"torch {torch.__version__} {mode}: store on port {port}", file=sys.stderr, flush=True)


class CountingBackend(C10dRendezvousBackend):
    # Counts the backend's store calls and the state bytes they return; a
    # dict increment, small next to the unpickling that follows each call.
    calls = {"get": 0, "compare_set": 0}
    state_bytes = 0

    def _call_store(self, store_op, *args, **kwargs):
        res = super()._call_store(store_op, *args, **kwargs)
        CountingBackend.calls[store_op] = CountingBackend.calls.get(store_op, 0) + 1
        CountingBackend.state_bytes += len(res) if isinstance(res, (bytes, str)) else 0
        return res


def make_handler(run_id):
    store = dist.TCPStore("127.0.0.1", port, is_master=False, multi_tenant=True,
                          timeout=timedelta(seconds=600))
    backend = CountingBackend(store, run_id)
    return store, DynamicRendezvousHandler.from_backend(
        run_id, store, backend, min_nodes=n, max_nodes=n, local_addr="127.0.0.1",
        timeout=RendezvousTimeout(join=timedelta(seconds=600)), keep_alive_interval=3600)


def join(h):
    b = time.time()
    try:
        info = h.next_rendezvous()
        res = [info.rank, info.world_size]
    except Exception as e:  # reported, not raised: the run goes on
        res = repr(e)
    e = time.time()
    h._stop_heartbeats()
    return {"b": b, "e": e, "r": res}


ctl = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=600))
for run in range(1, repeats + 1):
    run_id = f"rdzv-bench-{os.getpid()}-{run}"
    CountingBackend.calls = {"get": 0, "compare_set": 0}
    CountingBackend.state_bytes = 0
    t = time.time()
    if mode == "threads":
        handlers = [make_handler(run_id)[1] for _ in range(n)]
        connect_ms = (time.time() - t) * 1e3
        out = [None] * n
        gate = threading.Barrier(n + 1)

        def agent(i):
            gate.wait()
            out[i] = join(handlers[i])

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(n)]
        for th in threads:
            th.start()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        srv0 = cpu_of(srv)
        t0 = time.time()
        gate.wait()
        for th in threads:
            th.join()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        agents_cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
        lines = out
        for x in lines:
            x["calls"] = {}
            x["bytes"] = 0
        lines[0]["calls"] = CountingBackend.calls
        lines[0]["bytes"] = CountingBackend.state_bytes
        del handlers
    else:
        rr, ww = os.pipe()
        kids = []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for i in range(n):
            pid = os.fork()
            if pid == 0:
                die_with_parent()
                os.close(rr)
                # Its own connection: the parent's `ctl` socket is shared after fork.
                store, h = make_handler(run_id)
                store.add(f"{run_id}/ready", 1)
                store.wait([f"{run_id}/go"])
                x = join(h)
                x["calls"] = CountingBackend.calls
                x["bytes"] = CountingBackend.state_bytes
                os.write(ww, (json.dumps(x) + "\n").encode())  # < PIPE_BUF: atomic
                os._exit(0)
            kids.append(pid)
        os.close(ww)
        while ctl.add(f"{run_id}/ready", 0) < n:
            time.sleep(0.005)
        connect_ms = (time.time() - t) * 1e3
        srv0 = cpu_of(srv)
        t0 = time.time()
        ctl.set(f"{run_id}/go", "1")
        with os.fdopen(rr, "rb") as f:
            lines = [json.loads(line) for line in f.read().splitlines()]
        for pid in kids:
            os.waitpid(pid, 0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Includes each child's setup (connect, handler) and exit: an upper bound.
        agents_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    server_cpu = cpu_of(srv) - srv0
    ok = [x for x in lines if isinstance(x["r"], list)]
    errors = [x["r"] for x in lines if not isinstance(x["r"], list)]
    if len(lines) < n:
        errors.append(f"only {len(lines)} of {n} agents reported")
    ranks = sorted(x["r"][0] for x in ok)
    if not errors and (ranks != list(range(n)) or any(x["r"][1] != n for x in ok)):
        errors.append("ranks are not 0..N-1 each once, or a world size is not N")
    lat = sorted((x["e"] - x["b"]) * 1e3 for x in ok)
    pct = lambda p: lat[min(len(lat) - 1, int(p * (len(lat) - 1) + 0.5))] if lat else 0.0
    gets = sum(x["calls"].get("get", 0) for x in lines)
    cas = sum(x["calls"].get("compare_set", 0) for x in lines)
    print(json.dumps({
        "agents": n, "run": run, "mode": mode,
        "wall_ms": (max(x["e"] for x in lines) - min([t0] + [x["b"] for x in lines])) * 1e3,
        "join_p50_ms": pct(0.5), "join_p99_ms": pct(0.99), "join_max_ms": pct(1.0),
        "connect_ms": connect_ms, "cpu_s": agents_cpu + server_cpu, "server_cpu_s": server_cpu,
        "backend_calls": {"get": gets, "compare_set": cas},
        "backend_calls_per_agent": (gets + cas) / n,
        "state_mb": sum(x["bytes"] for x in lines) / 1e6,
        "errors": len(errors), "first_error": str(errors[0]) if errors else ""}), flush=True)
os.kill(srv, signal.SIGKILL)
os.waitpid(srv, 0)
"""

_children: list[subprocess.Popen] = []


class BenchError(Exception):
    pass


def _preexec():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    err = tempfile.TemporaryFile()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                         preexec_fn=_preexec, cwd=ROOT, env=env, start_new_session=True)
    p.stderr_file = err  # type: ignore[attr-defined]
    _children.append(p)
    return p


def stderr_of(p: subprocess.Popen) -> str:
    f = p.stderr_file  # type: ignore[attr-defined]
    f.seek(0)
    return f.read().decode(errors="replace")[-3000:]


def kill(p: subprocess.Popen) -> None:
    """Stops p's whole process group (the bench's children lead their own)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def stop_all() -> None:
    for p in _children:
        kill(p)


def read_json_line(p: subprocess.Popen, timeout: float, what: str) -> dict | None:
    """The next JSON line of p's stdout; None when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    fd = p.stdout.fileno()
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            p.wait()
            raise BenchError(f"{what}: exited with status {p.returncode}; stderr:\n{stderr_of(p)}")
        if chunk == b"\n":
            line = buf.decode()
            buf = b""
            if line.startswith("{"):
                return json.loads(line)
            continue
        buf += chunk


def run_side(argv: list[str], n: int, repeats: int, per_run_timeout: float, startup: float,
             what: str, env: dict | None = None,
             budget: float | None = None) -> tuple[list[dict], str | None]:
    """Runs one side's process for size n; returns its runs, and why it stopped early.

    With a budget, no further run starts once the runs so far took longer
    than it (a size that takes minutes per run gets fewer runs)."""
    p = spawn(argv, env)
    runs: list[dict] = []
    note = None
    spent = 0.0
    try:
        for i in range(repeats):
            if budget is not None and runs and spent > budget:
                note = f"{len(runs)} of {repeats} runs (time budget {budget:.0f} s)"
                break
            r = read_json_line(p, per_run_timeout + (startup if i == 0 else 0), what)
            if r is None:
                note = f"run {i + 1} did not finish within {per_run_timeout:.0f} s"
                break
            runs.append(r)
            spent += r["wall_ms"] / 1e3
            extra = (f"requests/agent {r['requests_per_agent']}" if "requests_per_agent" in r
                     else f"backend calls/agent {r['backend_calls_per_agent']:.1f}, "
                          f"state {r['state_mb']:.1f} MB")
            print(f"  {what} N={n:<5} run {i + 1}: {r['wall_ms']:9.1f} ms  join p50 "
                  f"{r['join_p50_ms']:8.1f} p99 {r['join_p99_ms']:8.1f} ms  {extra}  errors "
                  f"{r['errors']}" + (f" ({r['first_error']})" if r["errors"] else ""), flush=True)
    finally:
        kill(p)
    return runs, note


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def fmt_ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 100 else f"{v:.1f} ms"


SIDES = ("ours", "torch-processes", "torch-threads")
SIDE_NAMES = {"ours": "ours", "torch-processes": "PyTorch, processes",
              "torch-threads": "PyTorch, threads"}


def best_torch(side_runs: dict) -> tuple[str, float] | None:
    """The faster of PyTorch's two modes at one size (median wall), if any ran."""
    meds = [(k, med(side_runs[k], "wall_ms")) for k in SIDES[1:] if side_runs.get(k)]
    return min(meds, key=lambda kv: kv[1]) if meds else None


def render(args, results, notes, info, command, started, elapsed) -> str:
    L = ["# Rendezvous benchmark: `Rendezvous::join()` vs PyTorch's `DynamicRendezvousHandler`", ""]
    L.append(f"Generated by `bench/rendezvous_bench.py` on {started:%Y-%m-%d %H:%M} UTC "
             f"({elapsed / 60:.1f} minutes); source: {info['source']}. Medians of up to "
             f"{args.repeats} run(s) per size and side (fewer where noted).")
    L.append("")
    L.append("Reproduce (from the repository root):")
    L.append("")
    L.append("```sh")
    L.append("cmake --preset release && cmake --build --preset release --target rendezvous_loadgen")
    L.append(command)
    L.append("```")
    L.append("")
    L.append(f"- Machine: {info['nproc']} CPUs ({info['cpu']}), {info['mem_gib']} GiB RAM, "
             f"{platform.platform()}; shared with other work: load average "
             f"{info['load_start']} at start, {info['load_end']} at end")
    L.append(f"- PyTorch {info['torch']}, Python {platform.python_version()}")
    if info.get("torch_from"):
        L.append(f"- PyTorch's runs are those of the run started {info['torch_from']} "
                 "(`--torch-results`), taken with the same harness; ours were run again at the "
                 "time above")
    L.append("")
    target_n = 4096
    o4 = results.get(target_n, {}).get("ours")
    if o4:
        w = med(o4, "wall_ms")
        L.append(f"Target: {target_n:,} agents in under 1 s: **{fmt_ms(w)}** (median; runs "
                 f"{', '.join(fmt_ms(r['wall_ms']) for r in o4)}), "
                 f"{'met' if w < 1000 else 'not met'}.")
        L.append("")
    L.append("Time from the start barrier until every agent's rendezvous call has returned "
             "(median), and the CPU time the whole rendezvous took, agents and store server "
             "together (in brackets: the store server's part, the one that stays on one core "
             "however many hosts the agents run on):")
    L.append("")
    L.append("| agents | ours | ours: CPU | PyTorch, processes | CPU | PyTorch, threads | CPU "
             "| PyTorch / ours |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        r = results.get(n, {})
        row = [f"{n:,}"]
        for side in SIDES:
            runs = r.get(side)
            if runs:
                row += [fmt_ms(med(runs, "wall_ms")),
                        f"{med(runs, 'cpu_s'):.2f} s ({med(runs, 'server_cpu_s'):.2f} s)"]
            else:
                why = notes.get((n, side), "not run")
                row += [f"- ({why})" if side != "ours" else "-", "-"]
        bt = best_torch(r)
        if bt and r.get("ours"):
            row.append(f"**{bt[1] / med(r['ours'], 'wall_ms'):,.0f}x**")
        else:
            row.append("-")
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append("The ratio takes the faster of PyTorch's two modes at each size.")
    L.append("")
    L.append("Per agent:")
    L.append("")
    L.append("| agents | side | join p50 / p99 | store traffic per agent | runs |")
    L.append("|---:|---|---:|---|---:|")
    for n in args.sizes:
        r = results.get(n, {})
        for side in SIDES:
            runs = r.get(side)
            if not runs:
                continue
            if side == "ours":
                traffic = f"{med(runs, 'requests_per_agent'):.1f} store requests"
            else:
                gets = statistics.median(x["backend_calls"].get("get", 0) for x in runs)
                cas = statistics.median(x["backend_calls"].get("compare_set", 0) for x in runs)
                traffic = (f"{med(runs, 'backend_calls_per_agent'):.1f} state reads and "
                           f"COMPARE_SETs ({gets / n:.1f} + {cas / n:.1f}); "
                           f"{med(runs, 'state_mb') / n * 1e3:,.0f} KB of state read back")
            L.append(f"| {n:,} | {SIDE_NAMES[side]} | {fmt_ms(med(runs, 'join_p50_ms'))} / "
                     f"{fmt_ms(med(runs, 'join_p99_ms'))} | {traffic} | {len(runs)} |")
    L.append("")
    shown = [(k, v) for k, v in sorted(notes.items())]
    if shown:
        for (n, side), why in shown:
            L.append(f"- {SIDE_NAMES[side]}, {n:,} agents: {why}.")
        L.append("")
    errs = sorted({(n, k) for n in results for k in results[n] for x in results[n][k]
                   if x["errors"]})
    if errs:
        L.append(f"Runs with errors (counted in the figures above, not hidden): {errs}.")
        L.append("")
    L.append("## Method, and what to keep in mind")
    L.append("")
    for line in [
        "Every agent has its own store connection, opened before the clock starts (as an "
        "agent's is before its first rendezvous). A start barrier releases all agents; the "
        "figure runs from the release to the return of the last agent's call. Per-agent "
        "latency is from that agent's own start to its return. min = max = N, so both sides "
        "close the round when the N-th agent arrives: no last-call window is included.",
        "Ours: `bench/rendezvous_loadgen` runs the library's `Rendezvous::join()` (the code "
        "the agent runs) on N threads with 256 KiB stacks, against a `store::Server` on a "
        "thread of the same process. Agents' heartbeat threads are not started, except that "
        "the closer's heartbeat is kept moving (followers that wait more than five intervals "
        "take over a closer whose counter stands still). \"Store requests\" is the server's "
        "request counter over the timed window divided by N (the closer's waits, MULTI_GET "
        "and MULTI_SET included). CPU is the process's user + system time over the window.",
        "PyTorch: `DynamicRendezvousHandler.from_backend(...)` over `C10dRendezvousBackend` "
        "on a TCPStore client per agent, `next_rendezvous()` per agent; the TCPStore server "
        "(libuv) is a process of its own. Two modes, because each distorts differently on "
        "two CPUs: *processes* (forked from one that imported torch; the real shape, one "
        "agent per process, but N busy Python processes then share two CPUs) and *threads* "
        "(one process; the GIL serialises the handlers' Python). Processes stop at "
        f"{args.torch_max_processes} agents: each costs about 20 MB of its own, so 1,024 "
        f"would need more memory than this machine's {info['mem_gib']} GiB. CPU is the "
        "agents' (children's or the process's) plus the server's user + system time; for "
        "processes it includes each child's setup and exit.",
        "PyTorch's handler waits a random 0-0.3 s before its first attempt and, once it has "
        "joined, re-reads the state once a second until the round completes: both are its own "
        "design and part of its figure. Its state is one pickled, base64-encoded blob that each "
        "agent rewrites with COMPARE_SET and reads back whole; a failed COMPARE_SET is retried "
        "at once against the new state, so N contending agents make O(N) attempts each, each "
        "carrying O(N) bytes. Keep-alive is set to an hour, so no keep-alive write competes "
        "with the joins; rank 0's extra TCPStore for the workers is off "
        "(`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`) because our join does not create one. "
        "\"State reads and COMPARE_SETs\" counts the backend's store calls (a read is a WAIT "
        "and a GET on the wire).",
        "One side runs at a time, ours first at each size. A PyTorch run that exceeds "
        f"{args.torch_timeout:.0f} s is abandoned (its processes killed) and larger sizes are "
        f"not tried in that mode; a size whose PyTorch runs took over {args.torch_budget:.0f} s "
        "gets no further runs.",
        "Other jobs shared the machine (load averages above), and the agents and the server "
        "share its two CPUs on both sides. Loopback only: across hosts every round trip costs a "
        "network round trip more; ours makes a constant number per agent.",
    ]:
        L.append(f"- {line}")
    L.append("")
    return "\n".join(L)


def machine_info() -> dict:
    cpu = cpu_model()
    mem_gib = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = f"{int(line.split()[1]) / 2**20:.0f}"
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gib": mem_gib}


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loadgen", type=Path, default=ROOT / "build/release/bench/rendezvous_loadgen")
    ap.add_argument("--python", default=str(ROOT / ".venv/bin/python"))
    ap.add_argument("--sizes", default="16,64,256,1024,4096")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ours-timeout", type=float, default=120, help="seconds per run, ours")
    ap.add_argument("--torch-timeout", type=float, default=300, help="seconds per run, PyTorch")
    ap.add_argument("--torch-budget", type=float, default=200,
                    help="PyTorch: no further run of a size starts once its runs took this long")
    ap.add_argument("--torch-max-processes", type=int, default=256,
                    help="largest size run with one process per PyTorch agent (memory)")
    ap.add_argument("--torch-modes", default="processes,threads")
    ap.add_argument("--torch-results", type=Path, default=None,
                    help="take PyTorch's runs from an earlier --save-json instead of running them "
                    "(they take ~15 minutes and load the machine heavily)")
    ap.add_argument("--quick", action="store_true", help="16 and 64 agents, 1 run, no report")
    ap.add_argument("--save-json", type=Path)
    ap.add_argument("--output", type=Path, default=None,
                    help="report file ('-' for none; default docs/benchmarks.md, none with --quick)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = "16,64", 1
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    modes = [m for m in args.torch_modes.split(",") if m]
    if args.output is None:
        args.output = Path("-") if args.quick else ROOT / "docs/benchmarks.md"
    if not os.access(args.loadgen, os.X_OK):
        ap.error(f"{args.loadgen} is not an executable; build the rendezvous_loadgen target")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The reproducing command leaves out where results were saved or reused from.
    shown, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--torch-results", "--save-json"):
            skip = True
            continue
        if a.startswith(("--torch-results=", "--save-json=")):
            continue
        shown.append(a)
    command = ".venv/bin/python bench/rendezvous_bench.py" + "".join(
        " " + shlex.quote(a) for a in shown)
    info = machine_info()
    info["source"] = source_state()
    info["load_start"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    results: dict[int, dict[str, list[dict]]] = {}
    notes: dict[tuple[int, str], str] = {}
    # PyTorch's server resolves every client's address on its loop thread; see
    # the store section for this sandbox's stalling resolver.
    torch_env = dict(os.environ, RES_OPTIONS="timeout:1 attempts:1")
    gave_up: dict[str, str] = {}
    reused = None
    if args.torch_results:
        reused = json.loads(args.torch_results.read_text())
        ri = reused.get("info", {})
        info["torch_from"] = (f"{reused.get('started', 'earlier')} (load average "
                              f"{ri.get('load_start', '?')} at its start, "
                              f"{ri.get('load_end', '?')} at its end)")
        for n_text, sides in reused["results"].items():
            for side, runs in sides.items():
                if side.startswith("torch-") and int(n_text) in args.sizes:
                    results.setdefault(int(n_text), {})[side] = runs
        for key, why in reused.get("notes", {}).items():
            n_text, side = key.split(" ", 1)
            if side.startswith("torch-") and int(n_text) in args.sizes:
                notes[(int(n_text), side)] = why
    script_dir = tempfile.TemporaryDirectory(prefix="rdzv-bench-")
    torch_script = Path(script_dir.name) / "torch_agents.py"
    torch_script.write_text(TORCH_AGENTS)
    try:
        for n in args.sizes:
            results.setdefault(n, {})
            print(f"N={n}", flush=True)
            runs, note = run_side([str(args.loadgen), "--agents", str(n), "--repeats",
                                   str(args.repeats)], n, args.repeats, args.ours_timeout, 30,
                                  "ours ")
            results[n]["ours"] = runs
            if note:
                notes[(n, "ours")] = note
            for mode in modes if not reused else []:
                side = f"torch-{mode}"
                if mode == "processes" and n > args.torch_max_processes:
                    notes[(n, side)] = (f"not run: one process per agent needs about "
                                        f"{n * 20 / 1024:.0f} GiB here")
                    continue
                if mode in gave_up:
                    notes[(n, side)] = f"not tried after {gave_up[mode]}"
                    continue
                runs, note = run_side([args.python, str(torch_script), mode, str(n),
                                       str(args.repeats)], n, args.repeats, args.torch_timeout,
                                      120, f"torch {mode[0]}", torch_env, args.torch_budget)
                results[n][side] = runs
                if note:
                    notes[(n, side)] = note
                if not runs:
                    gave_up[mode] = f"{n:,} agents did not finish"
    finally:
        stop_all()
        script_dir.cleanup()
    info["load_end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        import torch  # noqa: PLC0415 (only for the version line)
        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = "?"
    elapsed = time.monotonic() - t_start
    if args.save_json:
        args.save_json.write_text(json.dumps({"results": {str(n): v for n, v in results.items()},
                                              "notes": {f"{k[0]} {k[1]}": v
                                                        for k, v in notes.items()},
                                              "info": info, "command": command,
                                              "started": f"{started:%Y-%m-%d %H:%M} UTC"},
                                             indent=1))
    print()
    for n in args.sizes:
        r = results.get(n, {})
        line = f"N={n:<5} ours " + (f"{med(r['ours'], 'wall_ms'):9.1f} ms" if r.get("ours")
                                     else "-")
        for side in SIDES[1:]:
            if r.get(side):
                line += f"   {side} {med(r[side], 'wall_ms'):9.1f} ms"
            elif (n, side) in notes:
                line += f"   {side}: {notes[(n, side)]}"
        bt = best_torch(r)
        if bt and r.get("ours"):
            line += f"   ratio {bt[1] / med(r['ours'], 'wall_ms'):.0f}x"
        print(line)
    if str(args.output) != "-":
        write_section(args.output, "rendezvous",
                      render(args, results, notes, info, command, started, elapsed))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"rendezvous_bench: {e}", file=sys.stderr)
        stop_all()
        sys.exit(1)
    except KeyboardInterrupt:
        stop_all()
        sys.exit(130)
