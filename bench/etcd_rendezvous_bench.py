#!/usr/bin/env python3
"""Rendezvous on etcd against the rendezvous on elasticrun's store.

Run from the repository root after building the load generator:

    cmake --preset release && cmake --build --preset release --target rendezvous_loadgen
    .venv/bin/python bench/etcd_rendezvous_bench.py --write-docs     # ~10 minutes

What is timed: bench/rendezvous_loadgen's first round of a fixed-size job
(N agents, N threads calling the library's Rendezvous::join(), each agent's
connection made before the clock starts; min = max = N, so the round
closes when the N-th agent arrives), once with the loadgen's in-process
store, once with --etcd against a real etcd (Debian's etcd-server) of one
member and of three members on loopback, started by this script. The same
code joins on both: only StoreClient's backend differs. The peer is
PyTorch's own etcd-v2 rendezvous (DynamicRendezvousHandler over
EtcdRendezvousBackend, python-etcd on etcd's v2 API, which etcd 3.4 serves
with --enable-v2): N handlers on threads of one process, each with its own
etcd client, the same barrier and stop. Each figure is the median of
--repeats runs.
"""

from __future__ import annotations

import sys as _sys
_sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """An etcd cluster of `members` on loopback, its files in a temporary directory."""

    def __init__(self, members: int, enable_v2: bool = False):
        self.dir = Path(tempfile.mkdtemp(prefix="etcd-bench-"))
        ports = [(free_port(), free_port()) for _ in range(members)]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        self.clients = [c for c, _ in ports]
        self.procs = []
        for i, (client, peer) in enumerate(ports):
            log = open(self.dir / f"m{i}.log", "wb")
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", f"m{i}", "--data-dir", str(self.dir / f"m{i}"),
                 "--listen-client-urls", f"http://127.0.0.1:{client}",
                 "--advertise-client-urls", f"http://127.0.0.1:{client}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--logger", "zap", *(["--enable-v2"] if enable_v2 else [])],
                stdout=log, stderr=log, start_new_session=True))
        deadline = time.monotonic() + 60
        while not self._healthy():
            if time.monotonic() > deadline:
                raise SystemExit(f"etcd did not start: see {self.dir}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        for port in self.clients:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if not json.load(r).get("health") == "true":
                        return False
            except OSError:
                return False
        return True

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.clients)

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


MISSED_HEARTBEATS = 600


def run_loadgen(loadgen: Path, agents: int, etcd: str | None, timeout: float,
                interval_ms: int = 1000) -> dict:
    # Followers do not beat (as in the rendezvous section): their join's
    # beat must not turn stale while a large round closes.
    args = [str(loadgen), "--agents", str(agents), "--join-timeout-s", str(int(timeout)),
            "--missed-heartbeats", str(MISSED_HEARTBEATS), "--heartbeat-interval-ms",
            str(interval_ms)]
    if etcd:
        args += ["--etcd", etcd]
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 60)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    r = json.loads(lines[-1])
    return r


# PyTorch's side, run as `python FILE ENDPOINT N` (a file, not `python -c`:
# the handler calls inspect.stack() for each event it records, several
# times slower without a source file): N DynamicRendezvousHandlers on
# etcd-v2, each with its own etcd client made before the clock, released
# by one barrier; prints one JSON line.
TORCH_ETCD_V2 = r"""
import json, os, resource, sys, threading, time
from datetime import timedelta
os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler, RendezvousTimeout)
endpoint, n = sys.argv[1], int(sys.argv[2])
run = f"bench-{os.getpid()}-{time.time_ns()}"
handlers = []
for i in range(n):
    p = RendezvousParameters(backend="etcd-v2", endpoint=endpoint, run_id=run,
                             min_nodes=n, max_nodes=n)
    backend, store = create_backend(p)
    # Keep-alive once an hour: no keep-alive write competes with the joins.
    handlers.append(DynamicRendezvousHandler.from_backend(
        run_id=run, store=store, backend=backend, min_nodes=n, max_nodes=n,
        timeout=RendezvousTimeout(join=timedelta(seconds=600)), keep_alive_interval=3600))
ranks, errors = [None] * n, []
gate = threading.Barrier(n + 1)
def go(i):
    gate.wait()
    try:
        ranks[i] = handlers[i].next_rendezvous().rank
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
cpu0 = time.process_time()
gate.wait()
t0 = time.monotonic()
for t in threads:
    t.join()
wall = (time.monotonic() - t0) * 1000
ok = sorted(r for r in ranks if r is not None) == list(range(n))
print(json.dumps({"agents": n, "wall_ms": wall, "cpu_s": time.process_time() - cpu0,
                  "errors": len(errors) + (0 if ok else 1),
                  "first_error": errors[0] if errors else ""}), flush=True)
for h in handlers:
    h._stop_heartbeats()
os._exit(0)
"""


def run_torch(python: str, script: Path, endpoint: str, agents: int, timeout: float) -> dict | None:
    try:
        out = subprocess.run([python, str(script), endpoint, str(agents)], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"PyTorch's etcd-v2 side failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def fmt_ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 100 else f"{v:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loadgen", type=Path, default=ROOT / "build/release/bench/rendezvous_loadgen")
    ap.add_argument("--sizes", default="16,256,1024,4096")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--torch-sizes", default="16,64,256",
                    help="sizes for PyTorch's etcd-v2 side (it is slow: 256 takes about a minute)")
    ap.add_argument("--torch-timeout", type=float, default=300)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = os.getloadavg()
    # (members, heartbeat interval): the interval is also how often a
    # waiting agent looks at the job's end and the closer's heartbeat.
    sides = {"ours": (None, 1000), "etcd, 1 member": (1, 1000), "etcd, 3 members": (3, 1000),
             "etcd, 1 member, 5 s": (1, 5000)}
    results: dict[tuple[str, int], list[dict]] = {}
    for side, (members, interval_ms) in sides.items():
        cluster = Etcd(members) if members else None
        try:
            for n in sizes:
                for rep in range(a.repeats):
                    r = run_loadgen(a.loadgen, n, cluster.endpoints if cluster else None, a.timeout,
                                    interval_ms)
                    results.setdefault((side, n), []).append(r)
                    print(f"{side:16} {n:5} agents run {rep + 1}: {r['wall_ms']:9.1f} ms "
                          f"(errors {r['errors']} {r.get('first_error', '')})", flush=True)
        finally:
            if cluster:
                cluster.stop()
    torch_sizes = [int(x) for x in a.torch_sizes.split(",") if x]
    torch_note = ""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "torch_etcd_v2.py"
        script.write_text(TORCH_ETCD_V2)
        cluster = Etcd(1, enable_v2=True)
        try:
            for n in torch_sizes:
                for rep in range(a.repeats):
                    r = run_torch(sys.executable, script, cluster.endpoints, n, a.torch_timeout)
                    if r is None:
                        torch_note = (f"PyTorch's etcd-v2 at {n:,} agents did not finish within "
                                      f"{a.torch_timeout:.0f} s; larger sizes not tried.")
                        break
                    results.setdefault(("torch", n), []).append(r)
                    print(f"{'torch etcd-v2':16} {n:5} agents run {rep + 1}: "
                          f"{r['wall_ms']:9.1f} ms (errors {r['errors']})", flush=True)
                if torch_note:
                    break
        finally:
            cluster.stop()
    load_end = os.getloadavg()

    def median(side: str, n: int, key: str = "wall_ms") -> float:
        return statistics.median(r[key] for r in results[(side, n)])

    rows = []
    for n in sizes:
        ours = median("ours", n)
        cells = [f"{n:,}", fmt_ms(ours)]
        for side in ("etcd, 1 member", "etcd, 3 members", "etcd, 1 member, 5 s"):
            v = median(side, n)
            cpu = median(side, n, "cpu_s")
            cells += [fmt_ms(v), f"{cpu:.2f} s", f"{v / ours:.1f}x"]
        if ("torch", n) in results:
            t = median("torch", n)
            cells += [fmt_ms(t), f"**{t / median('etcd, 1 member', n):.0f}x**"]
        else:
            cells += ["-", "-"]
        rows.append("| " + " | ".join(cells) + " |")
    errors = sum(r["errors"] for rs in results.values() for r in rs)
    cmd = ".venv/bin/python bench/etcd_rendezvous_bench.py --write-docs"
    body = f"""# Rendezvous on etcd: `--rdzv-backend etcd` against elasticrun's store

Generated by `bench/etcd_rendezvous_bench.py` on {started:%Y-%m-%d %H:%M} UTC; source: {source_state()}. Medians of {a.repeats} runs per size and side.

Reproduce (from the repository root):

```sh
cmake --preset release && cmake --build --preset release --target rendezvous_loadgen
{cmd}
```

- Machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.platform()}; load average {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} at start, {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f} at end
- etcd {subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout.split()[2]} (Debian's etcd-server), default settings, its data on this machine's disk; members on loopback
- Joins that failed: {errors}

Time from the start barrier until every agent's `Rendezvous::join()` has returned (median), with the CPU time of the agents' process (etcd's own is not in it):

| agents | elasticrun's store | etcd, 1 member | agents' CPU | / store | etcd, 3 members | agents' CPU | / store | etcd, 1 member, `heartbeat_interval=5` | agents' CPU | / store | PyTorch etcd-v2, 1 member | PyTorch / ours on etcd |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

- Both sides run the same `Rendezvous::join()`; only the store under `StoreClient` differs. A fresh agent makes five store operations (docs/protocol.md, "Rendezvous"); on etcd each is one HTTP request to a member's JSON gateway (the closer's bulk reads and writes are a transaction per 128 keys), and a WAIT that finds its key missing opens a watch, a connection of its own.
- Arrival indices: N agents taking one at once are N puts that raise the counter key's version, with no compare to fail and retry (docs/protocol.md, "etcd"); PyTorch's etcd-v2 backend keeps its whole state in one key and retries a compare-and-swap on every conflict, the O(N^2) pattern the rendezvous section above measures for its c10d backend.
- The agents, their HTTP clients and etcd share this machine's {os.cpu_count()} CPUs; etcd writes its log with an fsync per batch of writes. Three members add a round of replication per write, on the same CPUs.
- Agents' heartbeat threads are not started (as in the rendezvous section): each agent's join writes one beat with its record, and the closer's is kept moving by one heartbeat thread. A beat is judged stale after {MISSED_HEARTBEATS} intervals here instead of 5, so that a round that takes longer than 5 s to close on a loaded etcd does not count joined agents as dead. A real job's agents beat every `heartbeat_interval` (1 s by default), a put each on etcd: at thousands of nodes give `--rdzv-conf heartbeat_interval=5` (torchrun's keep-alive interval), or more.
- PyTorch: `DynamicRendezvousHandler` over `EtcdRendezvousBackend` (torchrun's `--rdzv-backend etcd-v2`), python-etcd {__import__("importlib.metadata").metadata.version("python-etcd")} on etcd's v2 API (this etcd with `--enable-v2`), N handlers on threads of one process (the GIL serialises their Python; one process per agent needs about 20 MB each, see the rendezvous section), keep-alive once an hour. Its state is one key rewritten with compare-and-swap by every agent, re-read whole after each conflict. {torch_note or ""}
- "PyTorch / ours on etcd" compares each with one etcd member at the default interval.
- Where the time goes at thousands of agents: etcd is CPU-bound on this machine (it shares 2 CPUs with 4,096 agent threads), and a waiting agent looks at the job once per heartbeat interval (one read: the job's end and the closer's heartbeat; its wait itself is a watch that stays open between looks, which costs nothing). N agents waiting are N reads a second at the default interval of 1 s; at 5 s, a fifth, and the round closes that much sooner. On dedicated etcd hosts the same reads are a small load: the column shows what the agents' own polling costs where etcd is starved.
"""
    print(body)
    if a.write_docs:
        write_section(ROOT / "docs/benchmarks.md", "etcd-rendezvous", body)


if __name__ == "__main__":
    main()
