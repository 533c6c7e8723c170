#!/usr/bin/env python3
"""Side-by-side benchmark: `elasticctl store` against PyTorch's TCPStore server.

Run with the project's virtualenv (it needs torch), after a release build:

    cmake --preset release && ninja -C build/release elasticctl store_loadgen
    .venv/bin/python bench/store_bench.py            # full run, ~5 minutes
    .venv/bin/python bench/store_bench.py --quick    # one short run of each

Both servers are driven by the same client, bench/store_loadgen (C++, one
thread, epoll, raw wire protocol). Every measurement starts its server fresh
and stops it afterwards. Each configuration runs --repeats times, alternating
which server goes first, and the report gives medians. The results go to
stdout and to docs/benchmarks.md (--output).

This script builds nothing; it refuses to run if a binary is missing.
"""

from __future__ import annotations

import sys as _sys
_sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parent))
from report_sections import cpu_model, write_section  # noqa: E402

import argparse
import ctypes
import datetime
import json
import os
import platform
import resource
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

# PyTorch's server runs in a Python process of its own, as in a job. Importing
# torch takes 5-15 s on a busy 2-CPU machine, so one "zygote" process imports
# it once and forks a fresh child per measurement; the child creates the
# TCPStore, prints where it listens and serves until SIGTERM. Each
# measurement thus still gets a new process and a new server.
TORCH_ZYGOTE = r"""
import ctypes, os, resource, signal, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
import torch
import torch.distributed as dist
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
print(f"zygote ready: torch {torch.__version__}", flush=True)
for line in sys.stdin:
    if line.strip() != "spawn":
        continue
    if os.fork() == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the zygote
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True,
                              wait_for_workers=False)
        print(f"torch store: listening on 127.0.0.1:{store.port} pid={os.getpid()} "
              f"libuv={store.libuvBackend}", flush=True)
        while True:
            signal.pause()  # SIGTERM's default action ends us
"""

SERVERS = ("ours", "torch")
PR_SET_PDEATHSIG = 1  # <sys/prctl.h>

# Every process this script starts, so that all are stopped however it ends.
_children: list[subprocess.Popen] = []


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- processes


def _preexec(cpu: int | None):
    def prep():
        # Die with the harness even if it is killed with SIGKILL.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # 10,000 connections need 10,000 descriptors in the server too.
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
    return prep


def _spawn(argv: list[str], cpu: int | None, stdin=subprocess.DEVNULL,
           env: dict | None = None) -> subprocess.Popen:
    err = tempfile.TemporaryFile()
    p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=err,
                         preexec_fn=_preexec(cpu), cwd=ROOT, env=env)
    p.stderr_file = err  # type: ignore[attr-defined]
    _children.append(p)
    return p


def _stderr_of(p: subprocess.Popen) -> str:
    f = p.stderr_file  # type: ignore[attr-defined]
    f.seek(0)
    return f.read().decode(errors="replace")[-2000:]


def _read_line(p: subprocess.Popen, timeout: float, what: str) -> str:
    """One line of p's stdout, or BenchError naming what was awaited."""
    deadline = time.monotonic() + timeout
    fd = p.stdout.fileno()
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}; stderr:\n"
                             + _stderr_of(p))
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            p.wait(timeout=5)
            raise BenchError(f"{what}: process exited with status {p.returncode}; stderr:\n"
                             + _stderr_of(p))
        buf += chunk
    return buf.decode().rstrip("\n")


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            if p.stdin:
                p.stdin.close()  # the torch server and the idle loadgen exit on EOF
        except OSError:
            pass
        try:
            p.wait(timeout=2)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if p in _children:
        _children.remove(p)
    p.stderr_file.close()  # type: ignore[attr-defined]
    if p.stdout:
        p.stdout.close()


def stop_all() -> None:
    for p in list(_children):
        try:
            _stop(p)
        except Exception:  # cleanup must reach every child
            try:
                p.kill()
            except OSError:
                pass


def server_env(args) -> dict:
    """Environment of both servers.

    PyTorch's server resolves every client's address to a host name
    (getnameinfo without NI_NUMERICHOST) on its event-loop thread when it
    accepts the connection. For ::ffff:127.0.0.1 that is a DNS query, and
    where the resolver stalls (in our sandbox, 5 s on every ~52nd query) the
    whole server stalls with it: 10,000 connections would take a quarter of
    an hour. PyTorch turns the lookups off after the first *failed* one
    (pytorch/pytorch#159007), so a resolver that gives up after 1 s makes
    that happen once, early. Both servers get the same environment; ours
    never resolves names.
    """
    env = dict(os.environ)
    if not args.keep_resolver:
        env["RES_OPTIONS"] = "timeout:1 attempts:1"
    return env


class TorchZygote:
    """The process that forks PyTorch store servers (see TORCH_ZYGOTE)."""

    def __init__(self, args):
        self.proc = _spawn([sys.executable, "-c", TORCH_ZYGOTE], args.server_cpu,
                           stdin=subprocess.PIPE, env=server_env(args))
        banner = _read_line(self.proc, 300, "python to import torch")
        self.torch_version = banner.split("torch ", 1)[1].strip()

    def spawn(self) -> str:
        self.proc.stdin.write(b"spawn\n")
        self.proc.stdin.flush()
        return _read_line(self.proc, 60, "the forked torch TCPStore to listen")

    def close(self) -> None:
        _stop(self.proc)  # EOF on stdin ends the zygote; its children die with it


class Server:
    """A store server process, started fresh; stop() ends it."""

    def __init__(self, kind: str, args: argparse.Namespace):
        self.kind = kind
        self.proc = None
        if kind == "ours":
            argv = [str(args.elasticctl), "--log-level", "warn", "store", "--host", "127.0.0.1",
                    "--port", "0"]
            self.proc = _spawn(argv, args.server_cpu, env=server_env(args))
            line = _read_line(self.proc, 30, "elasticctl store to listen")
            self.pid = self.proc.pid
        else:
            line = args.zygote.spawn()
            self.pid = int(line.split("pid=", 1)[1].split()[0])
        # "<who>: listening on HOST:PORT[ ...]"
        where = line.split("listening on ", 1)[1].split()[0]
        self.host, port = where.rsplit(":", 1)
        self.port = int(port)
        self.banner = line

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return os.path.exists(f"/proc/{self.pid}")

    def rss_kb(self) -> int:
        return _status_kb(self.pid, "VmRSS")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)  # elasticctl stops cleanly on SIGTERM
            _stop(self.proc)
            return
        # A zygote child: SIGCHLD is ignored there, so it vanishes from /proc
        # once it has exited.
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not os.path.exists(f"/proc/{self.pid}"):
                    return
                time.sleep(0.02)
        raise BenchError(f"torch store server {self.pid} does not exit")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of all threads of pid so far."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may contain spaces; fields after it are fixed.
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchError(f"no {field} in /proc/{pid}/status")


# ------------------------------------------------------------- measurements


def run_load(args, kind: str, clients: int) -> dict:
    server = Server(kind, args)
    try:
        time.sleep(0.2)  # let the server settle before the clock starts
        argv = [str(args.loadgen), server.host, str(server.port), "--clients", str(clients),
                "--seconds", str(args.seconds), "--warmup", str(args.warmup),
                "--mix", args.mix, "--value-size", str(args.value_size)]
        lg = _spawn(argv, args.client_cpu)
        line = _read_line(lg, args.warmup + 120, "store_loadgen to start measuring")
        if line != "measuring":
            raise BenchError(f"unexpected line from store_loadgen: {line}")
        server_cpu0, lg_cpu0 = cpu_seconds(server.pid), cpu_seconds(lg.pid)
        line = _read_line(lg, args.seconds + 60, "store_loadgen's result")
        # The loadgen may have exited already; until it is reaped, its
        # /proc entry (a zombie's) still holds its CPU times.
        server_cpu1, lg_cpu1 = cpu_seconds(server.pid), cpu_seconds(lg.pid)
        _stop(lg)
        result = json.loads(line)
        result["server_cpu"] = [b - a for a, b in zip(server_cpu0, server_cpu1)]
        result["loadgen_cpu"] = [b - a for a, b in zip(lg_cpu0, lg_cpu1)]
        if not server.alive():
            raise BenchError(f"{kind} server died during the run")
        return result
    finally:
        server.stop()


def run_idle(args, kind: str) -> dict:
    server = Server(kind, args)
    try:
        time.sleep(0.5)
        before = server.rss_kb()
        argv = [str(args.loadgen), server.host, str(server.port), "--idle", str(args.idle),
                "--timeout", "120"]
        lg = _spawn(argv, args.client_cpu, stdin=subprocess.PIPE)
        line = _read_line(lg, 180, "store_loadgen --idle to connect")
        if not line.startswith("ready"):
            raise BenchError(f"unexpected line from store_loadgen --idle: {line}")
        status = json.loads(line[len("ready"):])
        # Give the server a moment to finish whatever it does after the last
        # PING reply (freeing read buffers, for one) before sampling.
        time.sleep(1.0)
        after = server.rss_kb()
        _stop(lg)
        return {"rss_before_kb": before, "rss_kb": after, "delta_kb": after - before,
                "connections": status["connections"], "errors": status["errors"]}
    finally:
        server.stop()


# ------------------------------------------------------------------ report


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize_load(runs: list[dict]) -> dict:
    def per_op_us(r):
        return sum(r["server_cpu"]) / r["ops"] * 1e6 if r["ops"] else float("nan")

    return {
        # CPU time is what the server spent, whoever else ran: less noisy
        # than throughput on a shared machine.
        "server_us_per_op": median([per_op_us(r) for r in runs]),
        "server_user_us_per_op": median([r["server_cpu"][0] / r["ops"] * 1e6 if r["ops"] else 0
                                         for r in runs]),
        "server_sys_us_per_op": median([r["server_cpu"][1] / r["ops"] * 1e6 if r["ops"] else 0
                                        for r in runs]),
        "server_util": median([sum(r["server_cpu"]) / r["seconds"] for r in runs]),
        "loadgen_util": median([sum(r["loadgen_cpu"]) / r["seconds"] for r in runs]),
        "ops_per_s": median([r["ops_per_s"] for r in runs]),
        "ops_min": min(r["ops_per_s"] for r in runs),
        "ops_max": max(r["ops_per_s"] for r in runs),
        "p50_us": median([r["p50_us"] for r in runs]),
        "p99_us": median([r["p99_us"] for r in runs]),
        "errors": sum(r["errors"] for r in runs),
        "runs": len(runs),
    }


def summarize_idle(runs: list[dict]) -> dict:
    return {
        "rss_before_kb": median([r["rss_before_kb"] for r in runs]),
        "rss_kb": median([r["rss_kb"] for r in runs]),
        "delta_kb": median([r["delta_kb"] for r in runs]),
        "connections": min(r["connections"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "runs": len(runs),
    }


def machine_info() -> dict:
    model = cpu_model()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        libuv = subprocess.run(["pkg-config", "--modversion", "libuv"], capture_output=True,
                               text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        libuv = "unknown"
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "mem_gib": mem_gib, "python": platform.python_version(), "libuv": libuv}


def fmt_ops(x: float) -> str:
    return f"{x:,.0f}"


def fmt_us(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def fmt_mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


def render(args, info, tv, load, idle, loadavg, started, elapsed, command) -> str:
    L = []
    L.append("# Store benchmark: `elasticctl store` vs PyTorch's TCPStore")
    L.append("")
    L.append(f"Generated by `bench/store_bench.py` on {started:%Y-%m-%d %H:%M} UTC "
             f"({elapsed / 60:.1f} minutes). Medians of {args.repeats} run(s) per "
             "configuration; every run starts its server fresh.")
    L.append("")
    L.append("Reproduce (from the repository root):")
    L.append("")
    L.append("```sh")
    L.append("cmake --preset release && ninja -C build/release elasticctl store_loadgen")
    L.append(command)
    L.append("```")
    L.append("")
    L.append("## Setup")
    L.append("")
    L.append(f"- Machine: {info['nproc']} CPUs ({info['cpu']}), {info['mem_gib']:.0f} GiB RAM, "
             f"Linux {info['kernel']}")
    L.append(f"- Load average (1/5/15 min) at start {loadavg[0]}, at end {loadavg[1]}")
    L.append(f"- PyTorch {tv}: `TCPStore(\"127.0.0.1\", 0, is_master=True, use_libuv=True, "
             f"wait_for_workers=False)` in a Python {info['python']} process of its own (forked "
             "per measurement from one that imported torch once); ours: `elasticctl store`, "
             f"RelWithDebInfo, system libuv {info['libuv']}")
    pin = ("server pinned to CPU %d, load generator to CPU %d" % (args.server_cpu, args.client_cpu)
           if args.server_cpu is not None else "no CPU pinning")
    L.append(f"- Load: `store_loadgen --mix {args.mix} --value-size {args.value_size}`, "
             f"{args.warmup:g} s warm-up then {args.seconds:g} s measured, {pin}")
    L.append("")

    # Verdicts on the targets the issue set.
    L.append("## Targets")
    L.append("")
    L.append("| target | measured | met |")
    L.append("|---|---|---|")
    big = max(load) if load else None
    if big is not None:
        o, t = load[big]["ours"], load[big]["torch"]
        ratio = o["ops_per_s"] / t["ops_per_s"] if t["ops_per_s"] else float("inf")
        L.append(f"| throughput >= 1.5x PyTorch at {big} clients | {ratio:.2f}x "
                 f"| {'yes' if ratio >= 1.5 else 'no'} |")
        for n in sorted(load):
            o, t = load[n]["ours"], load[n]["torch"]
            L.append(f"| p99 latency below PyTorch, {n} client(s) | {fmt_us(o['p99_us'])} us vs "
                     f"{fmt_us(t['p99_us'])} us | {'yes' if o['p99_us'] < t['p99_us'] else 'no'} |")
    if idle:
        o = idle["ours"]
        L.append(f"| < 100 MB RSS with {args.idle:,} idle connections | {fmt_mb(o['rss_kb'])} "
                 f"| {'yes' if o['rss_kb'] < 100 * 1024 and o['errors'] == 0 else 'no'} |")
    L.append("")

    for n in sorted(load):
        o, t = load[n]["ours"], load[n]["torch"]
        L.append(f"## {n} client{'s' if n != 1 else ''}")
        L.append("")
        L.append("| server | ops/s (median) | ops/s (min-max) | p50 us | p99 us | errors "
                 "| server CPU per request (user + sys) | server CPU busy | loadgen CPU busy |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in (("elasticctl store", o), ("PyTorch TCPStore", t)):
            L.append(f"| {name} | {fmt_ops(r['ops_per_s'])} | {fmt_ops(r['ops_min'])}-"
                     f"{fmt_ops(r['ops_max'])} | {fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} "
                     f"| {r['errors']} | {r['server_us_per_op']:.1f} us "
                     f"({r['server_user_us_per_op']:.1f} + {r['server_sys_us_per_op']:.1f}) "
                     f"| {r['server_util']:.0%} "
                     f"| {r['loadgen_util']:.0%} |")
        tr = o["ops_per_s"] / t["ops_per_s"] if t["ops_per_s"] else float("nan")
        pr = o["p99_us"] / t["p99_us"] if t["p99_us"] else float("nan")
        cr = o["server_us_per_op"] / t["server_us_per_op"] if t["server_us_per_op"] else float("nan")
        L.append("")
        L.append(f"Ours/PyTorch: throughput **{tr:.2f}x**, p99 latency **{pr:.2f}x**, server CPU "
                 f"per request **{cr:.2f}x** (below 1 is better for the last two).")
        L.append("")

    if idle:
        o, t = idle["ours"], idle["torch"]
        L.append(f"## Memory with {args.idle:,} idle connections")
        L.append("")
        L.append("Each connection did VALIDATE + PING and then sat idle. RSS is the server "
                 "process's VmRSS from /proc, sampled 1 s after the last handshake.")
        L.append("")
        L.append("| server | RSS before | RSS with connections | delta | per connection "
                 "| connected | errors |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for name, r in (("elasticctl store", o), ("PyTorch TCPStore", t)):
            per = r["delta_kb"] * 1024 / r["connections"] if r["connections"] else float("nan")
            L.append(f"| {name} | {fmt_mb(r['rss_before_kb'])} | {fmt_mb(r['rss_kb'])} | "
                     f"{fmt_mb(r['delta_kb'])} | {per:,.0f} B | {r['connections']:,} "
                     f"| {r['errors']} |")
        L.append("")
        L.append("PyTorch's server lives in a Python process that has imported torch, so its "
                 "absolute RSS is mostly torch itself (and, the process being forked from one "
                 "that imported torch, somewhat less than a cold start's: pages it never "
                 "touches again are not counted); the delta is the fair comparison of what "
                 "the connections cost.")
        L.append("")

    if load:
        top = max(load)
        o, t = load[top]["ours"], load[top]["torch"]
        if o["server_sys_us_per_op"] > 0:
            ceiling = t["server_us_per_op"] / o["server_sys_us_per_op"]
            L.append(f"## Where the throughput target stands ({top} clients)")
            L.append("")
            L.append(
                f"Each request costs the server one read and one write on a loopback socket "
                f"plus its share of an epoll_wait, and that kernel time dominates: "
                f"{o['server_sys_us_per_op']:.1f} us of our {o['server_us_per_op']:.1f} us per "
                f"request, against {t['server_us_per_op']:.1f} us in all for PyTorch's server, "
                f"whose system calls are the same. Even with no user-space time at all, our "
                f"server could be at most {ceiling:.2f}x cheaper per request. And the load "
                f"generator, which costs about as much per request again, shares the "
                f"{info['nproc']} CPUs: a second event loop in the server would take CPU from "
                f"it rather than add throughput. So on this machine the 1.5x target is out of "
                f"reach for any server design that answers each request with its own read and "
                f"write; what remains to win is user-space time per request (here "
                f"{o['server_user_us_per_op']:.1f} us vs {t['server_user_us_per_op']:.1f} us), "
                f"p99 latency and memory. On a host with spare cores, several event loops "
                f"(SO_REUSEPORT) would scale where PyTorch's single loop cannot; that is the "
                f"route to the target, measured on such a host.")
            L.append("")

    L.append("## Method, and what to keep in mind")
    L.append("")
    notes = [
        "One client program for both servers: `bench/store_loadgen`, a single-threaded epoll "
        "loop that speaks the wire protocol directly. Each connection does VALIDATE + PING, "
        "then keeps exactly one request outstanding, cycling SET, GET, ADD over 64 keys of its "
        "own (`/bench/<conn>/<i%64>`; ADD uses `/bench/<conn>/<i%64>/count` because ADD on a "
        "non-numeric value closes the connection). Every reply is checked.",
        "SET has no reply in this protocol. As PyTorch's client does, the loadgen sends it and "
        "moves on: a SET is written together with the GET after it, and latency is recorded per "
        "reply (SET+GET, then ADD), i.e. per round trip. Throughput counts every request, "
        "SETs included. GET is the raw GET request, not PyTorch's `get()` (WAIT then GET).",
        f"Server and load generator share this machine's {info['nproc']} CPUs, and the loadgen "
        "is one thread. At high client counts the loadgen's own CPU time is part of what is "
        "measured, for both servers alike; ratios are more meaningful than absolute numbers.",
        "Server CPU per request is the server process's user and system CPU time "
        "(/proc/<pid>/stat, all threads) over the measured window divided by the requests "
        "completed in it; \"busy\" is that CPU time over the window's length (100% = one "
        "CPU). A server below ~100% busy was not the bottleneck: the loadgen, or CPU "
        "contention, was. CPU per request is the steadier figure on a shared machine.",
        "The machine was not idle: other jobs (builds, fuzzers, test suites) ran alongside, as "
        "the load averages above show. Runs alternate which server goes first so that drift "
        "hits both; the min-max column shows the spread. p99 in particular is sensitive to "
        "scheduling noise.",
        "PyTorch's server looks up a host name for every client it accepts (reverse DNS, "
        "on its only event-loop thread). This sandbox's resolver stalls 5 s on about every "
        "52nd query, which froze PyTorch's server for 5 s at a time and made 10,000 "
        "connections impractical. "
        + ("The harness therefore runs both servers with `RES_OPTIONS=\"timeout:1 "
           "attempts:1\"`: the first stalled lookup then fails after 1 s and PyTorch stops "
           "resolving for the rest of the process (its own fallback). Connection setup is "
           "not timed, so this only shortens the run. "
           if not args.keep_resolver else
           "This run kept the system resolver settings (`--keep-resolver`). ")
        + "On a cluster with slow reverse DNS the same stall would hit a real job's "
        "rendezvous; our server only formats addresses numerically.",
        "Loopback TCP only: no network latency, so these numbers measure server CPU cost per "
        "request and event-loop behaviour, not what a job sees across hosts.",
    ]
    for n in notes:
        L.append(f"- {n}")
    L.append("")
    return "\n".join(L)


def print_table(load, idle) -> None:
    print()
    print(f"{'clients':>7}  {'server':<6} {'ops/s':>12} {'p50 us':>10} {'p99 us':>10} "
          f"{'errors':>6} {'cpu us/op':>10} {'srv busy':>8} {'lg busy':>8}")
    for n in sorted(load):
        for kind in SERVERS:
            r = load[n][kind]
            print(f"{n:>7}  {kind:<6} {r['ops_per_s']:>12,.0f} {r['p50_us']:>10.1f} "
                  f"{r['p99_us']:>10.1f} {r['errors']:>6} {r['server_us_per_op']:>10.1f} "
                  f"{r['server_util']:>8.0%} {r['loadgen_util']:>8.0%}")
        o, t = load[n]["ours"], load[n]["torch"]
        print(f"{'':>7}  ratio  {o['ops_per_s'] / t['ops_per_s']:>11.2f}x "
              f"{'':>10} {o['p99_us'] / t['p99_us']:>9.2f}x {'':>6} "
              f"{o['server_us_per_op'] / t['server_us_per_op']:>9.2f}x")
    if idle:
        print()
        for kind in SERVERS:
            r = idle[kind]
            print(f"idle {kind:<6} RSS {r['rss_kb'] / 1024:8.1f} MB  (before "
                  f"{r['rss_before_kb'] / 1024:.1f} MB, delta {r['delta_kb'] / 1024:.1f} MB, "
                  f"{r['connections']} connected, {r['errors']} errors)")


# -------------------------------------------------------------------- main


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elasticctl", type=Path, default=ROOT / "build/release/elasticctl")
    ap.add_argument("--loadgen", type=Path, default=ROOT / "build/release/bench/store_loadgen")
    ap.add_argument("--repeats", type=int, default=5, help="runs per configuration (default 5)")
    ap.add_argument("--seconds", type=float, default=6.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per run")
    ap.add_argument("--clients", default="1,16,256", help="client counts, comma-separated")
    ap.add_argument("--mix", default="set,get,add")
    ap.add_argument("--value-size", type=int, default=64)
    ap.add_argument("--idle", type=int, default=10000, help="idle connections (0 skips)")
    ap.add_argument("--pin", action="store_true",
                    help="pin the server to the last CPU and the loadgen to CPU 0")
    ap.add_argument("--keep-resolver", action="store_true",
                    help="do not set RES_OPTIONS='timeout:1 attempts:1' for the servers "
                    "(see server_env)")
    ap.add_argument("--quick", action="store_true",
                    help="1 run per configuration, 2 s each: a smoke test, not a result")
    ap.add_argument("--save-json", type=Path, default=None,
                    help="also write every run's raw result to this file")
    ap.add_argument("--output", type=Path, default=None,
                    help="where to write the report ('-' for none; default docs/benchmarks.md, "
                    "or none with --quick)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.seconds, args.warmup = 1, 2.0, 0.5
    if args.output is None:
        args.output = Path("-") if args.quick else ROOT / "docs/benchmarks.md"
    args.client_counts = [int(x) for x in args.clients.split(",") if x]
    args.server_cpu = args.client_cpu = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            ap.error("--pin needs at least 2 CPUs")
        args.server_cpu, args.client_cpu = cpus[-1], cpus[0]
    for path in (args.elasticctl, args.loadgen):
        if not os.access(path, os.X_OK):
            ap.error(f"{path} is not an executable; build it first "
                     "(ninja -C build/release elasticctl store_loadgen)")
    return args


def main(argv) -> int:
    args = parse_args(argv)
    # SIGTERM (a CI timeout, a Ctrl-\) must still reach the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = ".venv/bin/python bench/store_bench.py" + "".join(
        " " + shlex.quote(a) for a in argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    load_start = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    info = machine_info()
    load_runs = {n: {k: [] for k in SERVERS} for n in args.client_counts}
    idle_runs = {k: [] for k in SERVERS}
    try:
        args.zygote = TorchZygote(args)
        tv = args.zygote.torch_version
        print(f"torch {tv}; {info['nproc']} CPUs ({info['cpu']}); load {load_start}", flush=True)
        for rep in range(args.repeats):
            # Alternate the order so slow drift (thermal, neighbours) hits both.
            order = SERVERS if rep % 2 == 0 else tuple(reversed(SERVERS))
            for n in args.client_counts:
                for kind in order:
                    r = run_load(args, kind, n)
                    load_runs[n][kind].append(r)
                    cpu = sum(r["server_cpu"])
                    print(f"run {rep + 1}/{args.repeats} clients={n:<4} {kind:<6} "
                          f"{r['ops_per_s']:>10,.0f} ops/s  p50 {r['p50_us']:>8.1f} us  "
                          f"p99 {r['p99_us']:>8.1f} us  server cpu "
                          f"{cpu / max(r['ops'], 1) * 1e6:.1f} us/op "
                          f"({cpu / r['seconds']:.0%} busy)  errors {r['errors']}"
                          + (f" ({r['first_error']})" if r["errors"] else ""), flush=True)
            if args.idle > 0:
                for kind in order:
                    r = run_idle(args, kind)
                    idle_runs[kind].append(r)
                    print(f"run {rep + 1}/{args.repeats} idle={args.idle} {kind:<6} RSS "
                          f"{r['rss_kb'] / 1024:.1f} MB (delta {r['delta_kb'] / 1024:.1f} MB, "
                          f"{r['connections']} connected, {r['errors']} errors)", flush=True)
    finally:
        stop_all()

    if args.save_json:
        raw = {"load": {str(n): load_runs[n] for n in args.client_counts}, "idle": idle_runs,
               "machine": info, "torch": tv, "command": command}
        args.save_json.write_text(json.dumps(raw, indent=1))
    load = {n: {k: summarize_load(load_runs[n][k]) for k in SERVERS} for n in args.client_counts}
    idle = {k: summarize_idle(idle_runs[k]) for k in SERVERS} if args.idle > 0 else None
    print_table(load, idle)
    elapsed = time.monotonic() - t0
    load_end = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    report = render(args, info, tv, load, idle, (load_start, load_end), started, elapsed, command)
    if str(args.output) != "-":
        write_section(args.output, "store", report)
        print(f"\nwrote {args.output} ({elapsed / 60:.1f} minutes)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"store_bench: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
