#!/usr/bin/env python3
"""Goodput under churn: one trace of membership changes, played against a
real training job under elasticrun and then under torchrun.

Run from the repository root after a release build (README.md in this
directory describes the trace format and the method):

    .venv/bin/python bench/churn/churn_bench.py \\
        --elasticrun build/release/elasticrun --elasticctl build/release/elasticctl
    .venv/bin/python bench/churn/churn_bench.py --quick ...   # ~1 min of training per launcher, no report

Each run: an `elasticctl store` on 127.0.0.1 as the rendezvous store, one
agent per node on 127.0.0.<n> (one gloo worker each) training
examples/python/train_elastic.py for the trace's samples; the trace's
times count from the job's first training step, and a trace with
`repeat` plays its events again and again until the job ends. The
workers' timing records (--events) are accounted by churn_accounting.py.
Every process leads its own process group and is killed in a finally
block, and so is anything whose command line names the run's directory.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import churn_accounting as acc  # noqa: E402
import churn_trace  # noqa: E402
from report_sections import write_section  # noqa: E402
from scaleup_bench import BenchError, Procs, start_store, wait_for  # noqa: E402

ROOT = HERE.parents[1]
TRAIN = ROOT / "examples/python/train_elastic.py"
# --inprocess: elasticrun's workers re-form in process (docs/inprocess.md).
TRAIN_INPROCESS = ROOT / "examples/python/train_inprocess.py"
GLOBAL_BATCH = 48
START_TIMEOUT_S = 300

# Windows shortened as in the integration suite (test/integration/elastic_job.py).
ELASTICRUN_FLAGS = [
    "--rdzv-conf", "heartbeat_interval=0.2,missed_heartbeats=5,last_call_timeout=0.5,join_timeout=120",
    "--scaling-timeout", "1", "--min-stable-period", "0", "--graceful-shutdown-timeout", "10",
    "--faulty-scale-down-timeout", "2",
]
# 1 s is the least last_call_timeout torchrun accepts; the store is the
# harness's, so no agent hosts it.
TORCHRUN_FLAGS = ["--monitor-interval", "0.1", "--rdzv-conf", "last_call_timeout=1,is_host=0"]


def say(text: str) -> None:
    print(f"[churn {time.strftime('%H:%M:%S')}] {text}", flush=True)


def ppid_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    return children


def descendants(pid: int) -> list[int]:
    tree, out, todo = ppid_map(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def worker_of(agent_pid: int, script: Path) -> int | None:
    """The agent's worker: a child running `python -u <script>` (the
    elasticrun agent's death watch is its child too, with the agent's argv)."""
    for pid in ppid_map().get(agent_pid, []):
        argv = cmdline(pid)
        if len(argv) > 2 and argv[1] == "-u" and str(script) in argv:
            return pid
    return None


def node_addr(n: int) -> str:
    """Node n's loopback address: 127.0.0.n for the first 254 nodes, then
    127.0.1.1 and on (all of 127/8 is loopback on Linux), so that a repeated
    trace that keeps starting nodes never runs out; .0 and .255 are skipped."""
    hi, lo = divmod(n - 1, 254)
    return f"127.0.{hi}.{lo + 1}"


def kill_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def leftovers(run_dir: Path) -> list[int]:
    """Processes whose command line names this run's directory."""
    key = str(run_dir)
    return [int(d.name) for d in Path("/proc").iterdir()
            if d.name.isdigit() and int(d.name) != os.getpid()
            and any(key in a for a in cmdline(int(d.name)))]


class Run:
    """One launcher, one trace: start the nodes, play the events, wait for the end."""

    def __init__(self, launcher: str, trace: churn_trace.Trace, args, run_dir: Path):
        self.launcher, self.trace, self.args, self.dir = launcher, trace, args, run_dir
        self.dir.mkdir(parents=True)
        self.events_dir = self.dir / "events"
        self.procs = Procs(self.dir)
        self.nodes: dict[int, subprocess.Popen] = {}
        self.gone: set[int] = set()  # nodes the trace stopped: any exit status is theirs
        self.exited: dict[int, float] = {}
        self.workers: dict[int, float] = {}  # worker pid -> last time the harness saw it alive
        self.next_scan = 0.0
        self.played: list[dict] = []
        self.notes: list[str] = []
        self.steps = math.ceil(trace.samples / GLOBAL_BATCH)
        self.inprocess = launcher == "elasticrun" and getattr(args, "inprocess", False)
        self.train = TRAIN_INPROCESS if self.inprocess else TRAIN
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
                        PYTHONPATH=str(ROOT / "python"), PATH=path, LOGLEVEL="WARNING",
                        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")

    def start_node(self, n: int) -> None:
        a, lo, hi = self.args, *self.trace.nnodes
        common = ["--nnodes", f"{lo}:{hi}", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", self.run_id,
                  "--local-addr", node_addr(n), "--max-restarts", "100"]
        if self.launcher == "elasticrun":
            argv = [a.elasticrun, *common, *ELASTICRUN_FLAGS]
            if a.warm_start:
                argv.append("--warm-start")
            if self.inprocess:
                argv.append("--inprocess-restart")
            # "{n}" stands for the node's number (a file per agent: --event-log x{n}.jsonl).
            argv += [arg.replace("{n}", str(n))
                     for arg in shlex.split(getattr(a, "elasticrun_args", "") or "")]
        else:
            argv = [a.torchrun, *common, *TORCHRUN_FLAGS]
        argv.append(str(self.train))
        if not (self.launcher == "elasticrun" and getattr(a, "memory_only", False)):
            argv += ["--ckpt", str(self.dir / "ckpt")]
        argv += ["--steps", str(self.steps),
                 "--events", str(self.events_dir), "--sample-s", str(a.sample_s),
                 "--save-every", str(a.save_every), "--pg-timeout", str(a.pg_timeout)]
        if getattr(a, "sync_save", False):
            argv.append("--sync-save")
        self.nodes[n] = self.procs.start(f"agent{n}", argv, self.env)

    def worker_of(self, n: int) -> int | None:
        return worker_of(self.nodes[n].pid, self.train)

    def live(self) -> list[int]:
        return sorted(n for n, p in self.nodes.items() if n not in self.gone and p.poll() is None)

    def target(self, n: int | None) -> int | None:
        """The trace's node, else the newest node whose worker runs (not a spare)."""
        if n is not None:
            return n if n in self.live() else None
        live = self.live()
        members = self.members(live)
        return (members or live or [None])[-1]

    def members(self, live: list[int]) -> list[int]:
        """The nodes of `live` whose worker trains in the job's current set of
        workers. With --inprocess a released node keeps its worker, parked
        (a hot spare): there, only the workers of the latest set count."""
        if not self.inprocess:
            return [m for m in live if self.worker_of(m)]
        latest: dict[int, float] = {}  # pid -> the attempt of its last start
        for path in self.events_dir.glob("events.*.jsonl"):
            for line in path.read_text().splitlines():
                if '"ev": "start"' in line:
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    latest[r["pid"]] = r["attempt"]
        current = max(latest.values(), default=None)
        return [m for m in live if latest.get(self.worker_of(m) or -1) == current]

    def ctl(self, *argv: str) -> str:
        cmd = [self.args.elasticctl, *argv, "--rdzv-endpoint", f"127.0.0.1:{self.port}",
               "--rdzv-id", self.run_id, "--no-wait"]
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            self.notes.append(f"{' '.join(argv)}: elasticctl exited {r.returncode}: {r.stderr.strip()}")
        return f"elasticctl {' '.join(argv)}"

    def sigterm(self, nodes: list[int]) -> None:
        for n in nodes:
            self.gone.add(n)
            kill_all([self.nodes[n].pid], signal.SIGTERM)

    def play(self, ev: churn_trace.Event) -> str | None:
        """Acts out one event; returns what was done, or None when it could not be."""
        if ev.action == "join":
            n = max(self.nodes) + 1
            self.start_node(n)
            return f"node {n} joins"
        if ev.action in ("leave", "kill", "kill-worker"):
            n = self.target(ev.arg)
            if n is None:
                return None
            if ev.action == "leave":
                self.sigterm([n])
                return f"node {n} leaves (SIGTERM to its agent)"
            if ev.action == "kill":
                self.gone.add(n)
                kill_all(descendants(self.nodes[n].pid))
                return f"node {n} killed (SIGKILL to its agent and all its processes)"
            w = self.worker_of(n)
            if w is None:
                return None
            kill_all([w])
            return f"node {n}'s worker killed (SIGKILL)"
        live = self.live()
        if self.launcher == "elasticrun":
            return self.ctl(ev.action, "--nodes", str(ev.arg))
        # torchrun has no operator requests: the closest real thing.
        if ev.action == "release":
            members = self.members(live) or live
            victims = members[-ev.arg:][: max(0, len(live) - self.trace.nnodes[0])]
            self.sigterm(victims)
            return f"release {ev.arg} as SIGTERM to node(s) {victims}"
        if ev.arg > len(live):
            new = list(range(max(self.nodes) + 1, max(self.nodes) + 1 + ev.arg - len(live)))
            for n in new:
                self.start_node(n)
            return f"scale {ev.arg} as new agent(s) {new}"
        victims = live[ev.arg:]
        self.sigterm(victims)
        return f"scale {ev.arg} as SIGTERM to node(s) {victims}"

    def watch_workers(self) -> None:
        """Notes when each worker was last seen alive: a worker's own last
        record comes before its interpreter's exit, which can take seconds."""
        now = time.time()
        if now >= self.next_scan:  # new workers: a /proc scan, four times a second
            self.next_scan = now + 0.25
            for p in self.nodes.values():
                w = worker_of(p.pid, self.train) if p.poll() is None else None
                if w is not None:
                    self.workers.setdefault(w, now)
        for pid in self.workers:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    self.workers[pid] = now
            except (OSError, IndexError):
                pass

    def poll_exits(self) -> bool:
        """Notes agent exits; True when every agent has exited."""
        self.watch_workers()
        now = time.time()
        for n, p in self.nodes.items():
            if p.poll() is not None and n not in self.exited:
                self.exited[n] = now
        return len(self.exited) == len(self.nodes)

    def first_step(self) -> bool:
        for path in self.events_dir.glob("events.*.jsonl"):
            if '"ev": "step"' in path.read_text():
                return True
        return False

    def last_record(self) -> float:
        """When a worker last wrote a record (file modification time)."""
        return max((p.stat().st_mtime for p in self.events_dir.glob("events.*.jsonl")), default=0.0)

    def execute(self) -> dict:
        self.run_id = f"churn-{self.launcher}-{os.getpid()}"
        try:
            self.port = start_store(self.procs, self.args.elasticctl, self.env)
            self.t_launch = time.time()
            for n in range(1, self.trace.nodes + 1):
                self.start_node(n)
            if not wait_for(lambda: self.first_step() or self.poll_exits(), START_TIMEOUT_S, 0.05):
                raise BenchError(f"{self.launcher}: no training step within {START_TIMEOUT_S} s\n"
                                 + self.procs.log("agent1"))
            t0 = time.time()
            say(f"{self.launcher}: first step {t0 - self.t_launch:.1f} s after launch")
            upcoming = self.trace.timeline()
            ev = next(upcoming, None)
            deadline = t0 + self.args.timeout
            stalled = False
            while not self.poll_exits():
                if time.time() > deadline:
                    raise BenchError(f"{self.launcher}: not done within {self.args.timeout:.0f} s")
                if time.time() - self.last_record() > self.args.stall_s:
                    # Counted as it stands: the wall time ends here, the
                    # samples not trained are missing from the figures.
                    self.notes.append(f"no worker wrote a record for {self.args.stall_s:.0f} s: "
                                      "the job hung; stopped there")
                    say(f"{self.launcher}: hung, stopping the run")
                    stalled = True
                    break
                if ev is not None and time.time() >= t0 + ev.t:
                    t = time.time()
                    what = self.play(ev)
                    if what is None:
                        self.notes.append(f"t={ev.t:g} {ev.describe()}: no node to act on; skipped")
                    else:
                        self.played.append({"t": t, "at": t - t0, "action": ev.action, "what": what,
                                            "cycle": ev.cycle})
                        say(f"{self.launcher}: t={t - t0:.1f} s {what}")
                    ev = next(upcoming, None)
                time.sleep(0.02)
            t_end = time.time() if stalled else max(self.exited.values())
            # The trace as written is owed in full; its repeats go on only
            # for as long as the job runs, so a job that ends during one
            # misses nothing.
            missed = [] if ev is None else itertools.chain([ev], upcoming)
            for e in itertools.takewhile(lambda e: e.cycle == 0, missed):
                self.notes.append(f"t={e.t:g} {e.describe()}: the job had ended; not played")
            bad = {n: p.returncode for n, p in self.nodes.items()
                   if n not in self.gone and p.returncode != 0}
            if bad:
                self.notes.append(f"agents exited non-zero: {bad}")
        finally:
            self.procs.stop_all(self.dir / "no-markers")
            left = leftovers(self.dir)
            if left:
                kill_all(left)
                self.notes.append(f"{len(left)} process(es) left behind, killed: {left}")
        # What the accounting needs besides the records, so that it can be redone.
        (self.dir / "run.json").write_text(json.dumps(
            {"played": self.played, "alive": self.workers, "t_launch": self.t_launch,
             "t_end": t_end, "samples": self.trace.samples, "notes": self.notes,
             "launcher": self.launcher, "agents_exit": {n: p.returncode for n, p in self.nodes.items()}}))
        return account_run(self.dir)


def account_run(run_dir: Path, launcher: str | None = None, agents_exit: dict | None = None) -> dict:
    """A run's figures from its directory: the workers' records and run.json
    (launcher and agents_exit for a run.json from before they were in it)."""
    run = json.loads((run_dir / "run.json").read_text())
    res = acc.account(acc.load_records(run_dir / "events"), run["played"], run["t_launch"],
                      run["t_end"], run["samples"], alive={int(k): v for k, v in run["alive"].items()})
    steps = math.ceil(run["samples"] / GLOBAL_BATCH)
    res.update(launcher=run.get("launcher", launcher), played=run["played"], notes=run["notes"],
               steps_expected=steps, agents_exit=run.get("agents_exit", agents_exit))
    if res["steps"] != steps:
        res["notes"].append(f"surviving steps {res['steps']}, expected {steps}")
    return res


def fmt_s(v) -> str:
    return "-" if v is None else f"{v:.1f} s"


def table(results: dict, fixed: dict | None) -> str:
    e, t = results.get("elasticrun"), results.get("torchrun")
    L = ["| measure | elasticrun | torchrun | elasticrun / torchrun |", "|---|---:|---:|---:|"]

    def row(name, get, fmt, ratio=True):
        ev, tv = (get(e) if e else None), (get(t) if t else None)
        r = f"{ev / tv:.2f}x" if ratio and ev is not None and tv else "-"
        L.append(f"| {name} | {fmt(ev) if ev is not None else '-'} | "
                 f"{fmt(tv) if tv is not None else '-'} | {r} |")

    pct = lambda v: f"{v * 100:.1f}%"  # noqa: E731
    row("goodput (kept training time / wall time)", lambda r: r["goodput"], pct)
    row("goodput from the first training step", lambda r: r["goodput_from_first_step"], pct)
    row("goodput with worker starts left out (kept / (wall - worker start))",
        lambda r: r["kept_s"] / (r["wall_s"] - r["breakdown"][acc.START]), pct)
    row("wall time", lambda r: r["wall_s"], fmt_s, ratio=False)
    row("samples/s over the run", lambda r: r["samples_per_s"], lambda v: f"{v:.0f}")
    if fixed:
        row("samples/s, share of the fixed-size run's", lambda r: r["samples_per_s"] / fixed["samples_per_s"],
            pct, ratio=False)
    row("steps lost to rollbacks", lambda r: r["steps_lost"], lambda v: f"{v}", ratio=False)
    row("recovery after an event, mean (event to first new step)",
        lambda r: mean([x["total"] for x in r["recoveries"] if x["total"] is not None]), fmt_s)
    row("time lost per event, mean (no step from the last old one to the first new one, "
        "plus training rolled back)", lambda r: mean(
            [x["pause"] + x["lost_s"] for x in r["recoveries"] if x.get("pause") is not None]),
        fmt_s)
    for cat in acc.CATEGORIES[1:]:
        # .get: a run from before a category existed (--render) shows "-".
        row(f"time: {cat}", lambda r, c=cat: r["breakdown"].get(c), fmt_s, ratio=False)
    return "\n".join(L)


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def recovery_table(res: dict) -> str:
    L = ["| t | event | world | " + " | ".join(acc.PHASES) + " | total | steps lost | pause |",
         "|---:|---|---|" + "---:|" * (len(acc.PHASES) + 3)]
    for p, r in zip(res["played"], res["recoveries"]):
        ph = r.get("phases")
        world = f"{r.get('world_before')} -> {r.get('world_after')}" if ph else "-"
        cells = [fmt_s(ph[k]) if ph else "-" for k in acc.PHASES]
        note = "" if ph else f" ({r.get('note')})"
        L.append(f"| {p['at']:.0f} s | {p['what']}{note} | {world} | " + " | ".join(cells)
                 + f" | {fmt_s(r['total'])} | {r['steps_lost']} | {fmt_s(r.get('pause'))} |")
    return "\n".join(L)


def findings(results: dict) -> list[str]:
    """Where the time that is not goodput went, in sentences computed from the figures."""
    out = []
    for name, r in results.items():
        wall = r["wall_s"]
        rest = sorted(((v, k) for k, v in r["breakdown"].items() if k != acc.KEPT), reverse=True)
        top = "; ".join(f"{k} {v:.0f} s ({v / wall * 100:.0f}% of the wall time)" for v, k in rest[:3])
        out.append(f"{name}: {r['goodput'] * 100:.1f}% goodput; the largest of the rest: {top}.")
    for name, r in results.items():
        recs = [x for x in r["recoveries"] if x.get("phases")]
        if not recs:
            continue
        avg = {k: mean([x["phases"][k] or 0.0 for x in recs]) for k in acc.PHASES}
        own = avg["detection"] + avg["rendezvous"]
        lost = ", ".join(f"{x['event']} {x['steps_lost']}" for x in recs if x["steps_lost"]) or "none"
        out.append(f"{name}, mean of {len(recs)} recoveries: detection + rendezvous (the "
                   f"launcher's own part) {own:.1f} s; stopping the old workers until their "
                   f"processes are gone {avg['stop']:.1f} s; "
                   f"restart (new processes: interpreter, import torch, process group, model) "
                   f"{avg['restart']:.1f} s; load and first step "
                   f"{avg['checkpoint load'] + avg['first step']:.1f} s. Steps lost to rollbacks: "
                   f"{lost}.")
    return out


def other_runs(others: list[dict]) -> list[str]:
    out = []
    for o in others:
        e, t = o["results"].get("elasticrun"), o["results"].get("torchrun")
        if not (e and t):
            continue
        out.append(f"{o['info']['started']} UTC ({o['info']['source']}; load average "
                   f"{o['info']['load_start']} at start): goodput elasticrun "
                   f"{e['goodput'] * 100:.1f}%, torchrun {t['goodput'] * 100:.1f}% "
                   f"({e['goodput'] / t['goodput']:.2f}x); wall time {e['wall_s']:.0f} s and "
                   f"{t['wall_s']:.0f} s; worker start {e['breakdown'][acc.START]:.0f} s and "
                   f"{t['breakdown'][acc.START]:.0f} s. {o.get('remark', '')}".rstrip())
    return out


def reaccount(saved: dict, base: Path) -> None:
    """The figures of a saved run (churn.json) from its run directories again."""
    runs = saved.get("runs") or {name: [res] for name, res in saved["results"].items()}
    for name, done in runs.items():
        for i, old in enumerate(done):
            d = base / (f"{name}-{i + 1}" if len(done) > 1 else name)
            done[i] = account_run(d, old["launcher"], old["agents_exit"])
    saved["results"] = {name: median_run(done) for name, done in runs.items()}
    if saved.get("runs"):
        saved["runs"] = runs
    if saved.get("fixed"):
        saved["fixed"] = account_run(base / "fixed", "elasticrun", saved["fixed"]["agents_exit"])
    saved["info"]["source"] += f", accounted again by {git_source()}"


def median_run(done: list[dict]) -> dict:
    """The run of median goodput (the lower of the two middle ones for an even count)."""
    return sorted(done, key=lambda r: r["goodput"])[(len(done) - 1) // 2]


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def headline(results: dict, runs: dict | None) -> dict[str, dict[str, float]]:
    """Per launcher: goodput and goodput from the first step, medians over
    its runs (the one run's figures when there is one)."""
    out = {}
    for name, res in results.items():
        done = (runs or {}).get(name) or [res]
        out[name] = {k: median([r[k] for r in done]) for k in ("goodput", "goodput_from_first_step")}
    return out


def runs_list(runs: dict) -> list[str]:
    """One line per run, in the order they ran."""
    out = []
    for name, done in runs.items():
        figures = "; ".join(f"{r['goodput'] * 100:.1f}% ({r['goodput_from_first_step'] * 100:.1f}% "
                            f"from the first step, {r['wall_s']:.0f} s, {len(r['played'])} events, "
                            f"{r['steps_lost']} steps lost)" for r in done)
        out.append(f"{name}: {figures}")
    return out


def section_name(trace_path, inprocess: bool = False) -> str:
    """docs/benchmarks.md section of a trace: the default trace's is
    'churn', the headline figures; each other trace has one of its own,
    and so has each trace run with --inprocess."""
    stem = Path(trace_path).stem
    name = "churn" if stem == "steady" else f"churn-{stem}"
    return f"{name}-inprocess" if inprocess else name


def write_report(args, body: str) -> None:
    section = section_name(args.trace, getattr(args, "inprocess", False))
    write_section(args.report, section, body)
    say(f"report: {args.report} (section '{section}')")


def render(args, trace, results, fixed, info, others: list[dict] | None = None,
           runs: dict | None = None) -> str:
    e, t = results.get("elasticrun"), results.get("torchrun")
    n_runs = max((len(v) for v in (runs or {}).values()), default=1)
    med = headline(results, runs)
    inprocess = getattr(args, "inprocess", False)
    beside_headline = section_name(args.trace, inprocess) != "churn"
    title = "# Goodput under churn: a training job through membership changes, `elasticrun` vs `torchrun`"
    if beside_headline:
        title += f" ({Path(args.trace).stem} trace{', in-process re-formation' if inprocess else ''})"
    L = [title, ""]
    how_many = ("one run per launcher" if n_runs == 1 else
                f"{n_runs} runs per launcher, taking turns; goodput figures are medians, and the "
                f"tables show each launcher's run of median goodput")
    L.append(f"Generated by `bench/churn/churn_bench.py` on {info['started']} UTC; {how_many} "
             f"(about {info['minutes']:.0f} minutes in all); source: {info['source']}.")
    L += ["", "Reproduce (from the repository root):", "", "```sh",
          "cmake --preset release && cmake --build --preset release --target elasticrun elasticctl",
          info["command"], "```", ""]
    L.append(f"- Machine: {info['nproc']} CPUs, {platform.platform()}; shared with other work: load "
             f"average {info['load_start']} at start, {info['load_end']} at end")
    repeat = f" repeated every {trace.repeat:g} s while the job runs" if trace.repeat else ""
    played = ", ".join(f"{name} {len(res['played'])}" for name, res in results.items())
    L.append(f"- PyTorch {info['torch']}; trace `{os.path.relpath(Path(args.trace).resolve(), ROOT)}`: "
             f"--nnodes {trace.nnodes[0]}:{trace.nnodes[1]}, {trace.nodes} nodes at the start, "
             f"{trace.samples:,} samples ({math.ceil(trace.samples / GLOBAL_BATCH):,} steps of "
             f"{GLOBAL_BATCH}), {len(trace.events)} events{repeat}, about "
             f"{trace.changes_per_minute():.1f} per minute of training; played: {played}")
    sync = getattr(args, "sync_save", False)
    worker = ("elasticrun: examples/python/train_inprocess.py under `--inprocess-restart` "
              "(train_elastic.py's job through elasticrun.inprocess.run(): survivors re-form in "
              "process, new workers take the state from a survivor), torchrun: "
              "examples/python/train_elastic.py" if inprocess else "examples/python/train_elastic.py")
    L.append(f"- Worker: {worker} on CPU (gloo), one per node, "
             f"`--sample-s {args.sample_s} --save-every {args.save_every}"
             f"{' --sync-save' if sync else ''}`: periodic checkpoints written "
             f"{'in the training loop' if sync else 'in the background (save_async)'}, by both launchers")
    L.append("")
    if e and t:
        me, mt = med["elasticrun"], med["torchrun"]
        ok1 = me["goodput"] >= 0.95
        ok1b = me["goodput_from_first_step"] >= 0.95
        r = me["goodput"] / mt["goodput"] if mt["goodput"] else float("inf")
        of = " (medians)" if n_runs > 1 else ""
        if beside_headline:
            L.append(f"The targets are set for one membership change per minute (the steady trace, "
                     f"section 'Goodput under churn'); this trace has "
                     f"{trace.changes_per_minute():.1f}, and is reported beside them.")
            L.append("")
        L.append(f"Targets{of}: goodput >= 95% with one membership change per minute: "
                 f"**{me['goodput'] * 100:.1f}%** over the whole run ({'met' if ok1 else 'not met'}), "
                 f"**{me['goodput_from_first_step'] * 100:.1f}%** from the first training step "
                 f"({'met' if ok1b else 'not met'}); >= 1.5x torchrun's: **{r:.2f}x** "
                 f"({'met' if r >= 1.5 else 'not met'}).")
        L.append("")
    if n_runs > 1:
        L += ["Each run's goodput, in the order they ran:", ""]
        L += [f"- {x}" for x in runs_list(runs)]
        L.append("")
    L.append(table(results, fixed))
    L.append("")
    if fixed:
        L.append(f"Fixed-size run (elasticrun, {trace.nodes} nodes, no events, the same samples): "
                 f"{fixed['samples_per_s']:.0f} samples/s, goodput {fixed['goodput'] * 100:.1f}% "
                 f"({fixed['goodput_from_first_step'] * 100:.1f}% from the first step), "
                 f"wall time {fixed['wall_s']:.1f} s.")
        mt = med.get("torchrun")
        if mt and mt["goodput"] and mt["goodput_from_first_step"]:
            # No launcher beats the job without events: that bounds the ratio.
            L.append("")
            L.append(f"That run bounds what any launcher reaches on this trace with this script: "
                     f"at its goodput, elasticrun would be "
                     f"{fixed['goodput'] / mt['goodput']:.2f}x torchrun's"
                     f"{' median' if n_runs > 1 else ''} "
                     f"({fixed['goodput_from_first_step'] / mt['goodput_from_first_step']:.2f}x "
                     f"from the first step).")
        L.append("")
    if others:
        L += ["Other runs of this trace (same harness and settings):", ""]
        L += [f"- {x}" for x in other_runs(others)]
        L.append("")
    L += ["## Where the rest goes", ""]
    L += [f"- {x}" for x in findings(results)]
    L.append("")
    for name, res in results.items():
        L.append(f"## Recovery after each event: {name}")
        L.append("")
        L.append(recovery_table(res))
        L.append("")
        for n in res["notes"]:
            L.append(f"- {n}")
        if res["notes"]:
            L.append("")
    L += ["## Method, and what to keep in mind", ""]
    L += [f"- {x}" for x in METHOD]
    if inprocess:
        L += [f"- {x}" for x in METHOD_INPROCESS]
    return "\n".join(L)


METHOD = [
    "goodput = time in training steps whose results survive into the final model / wall time, "
    "from the harness starting the first agent to the last agent's exit. A step survives when its "
    "execution is the last one of that step number; rank 0's step records are counted (ranks step "
    "in lock-step). The second goodput figure starts at the job's first training step, leaving out "
    "the one-time start (import torch, first rendezvous), which a long job amortises.",
    "Every instant of the wall time is put in one category, the first that applies: kept training, "
    "training lost to a rollback, checkpoint save (periodic, at a stop, rescue after a failure, "
    "final), checkpoint load, worker start (interpreter, import torch, process group, model), the "
    "loop between steps, and otherwise no worker training (detection, stop, rendezvous, spawn).",
    "Recovery phases per event: detection (the event until the old workers first learn of it: "
    "elasticrun's SIGUSR1, an error in a collective or a rescue save, or else their last step), "
    "stop (until the last old worker process is gone, as the harness sees it in /proc every 20 ms, "
    "less the checkpoint saved meanwhile; steps trained meanwhile still count as goodput), "
    "checkpoint save (at a stop, or a surviving worker's rescue of the state it holds after a "
    "peer died), rendezvous (until the first new worker process starts), restart (until every new "
    "worker has imported torch, joined its process group and built the model), checkpoint load, "
    "first step. The pause column is the time with no training step, from the old workers' "
    "last step to the new workers' first (the job trains on through a detection and up to an "
    "agreed stop); the time lost per event adds to it the training a rollback threw away.",
    "Compute is a stand-in: each rank pauses `--sample-s` seconds per local sample inside each step, "
    "after the real forward, backward and gloo all-reduces of a small model. Steps therefore get "
    "shorter as the world grows, as data-parallel compute does, without several workers contending "
    "for the 2 shared CPUs; what is real is everything the launchers do: processes, rendezvous, "
    "signals, gloo, DCP checkpoints, the import of torch at every restart.",
    "elasticrun: the integration suite's shortened windows (`--rdzv-conf heartbeat_interval=0.2,"
    "missed_heartbeats=5,last_call_timeout=0.5 --scaling-timeout 1 --min-stable-period 0 "
    "--faulty-scale-down-timeout 2`). torchrun: `--monitor-interval 0.1 --rdzv-conf "
    "last_call_timeout=1,is_host=0` (1 s is the least last_call_timeout it accepts) with "
    "`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, without which it cannot scale up at all. Both: "
    "`--max-restarts 100`, one `elasticctl store` on 127.0.0.1 as the rendezvous store (so killing "
    "a node never kills the store), nodes on 127.0.0.<n>.",
    "Events: join starts a new agent; leave is SIGTERM to an agent (a spot notice); kill is SIGKILL "
    "to the agent and every process under it at once (a node dying); kill-worker is SIGKILL to the "
    "worker. Without a node number they take the newest node that runs a worker. torchrun has no "
    "operator requests, so `release K` becomes SIGTERM to the K newest nodes (never below its "
    "minimum) and `scale N` starts new agents or SIGTERMs the newest ones: the closest real thing, "
    "and a released elasticrun node stays up as a spare where torchrun's is gone. A trace with "
    "`repeat S` plays its events again, S seconds later each time, for as long as the job runs: "
    "the job that runs longer meets more events, at the same rate.",
    "torchrun restarts every worker on any change (a join is seen by the running agents, a "
    "departure as a failed collective) and the script resumes from its last checkpoint, losing "
    "the steps since; elasticrun stops every rank at one agreed step, saves, and resumes there "
    "after a join, release, scale or leave (the leaving node's workers stop with the others), and "
    "rolls back to its last checkpoint after a failure (kill, kill-worker). When a peer dies, a "
    "surviving worker may save a rescue of the replicated state it holds at its last completed "
    "step, under either launcher, and the next workers resume there.",
    "Both launchers start new worker processes on every node at every membership change; neither "
    "keeps a healthy worker across one. A cold start costs an interpreter, `import torch` (about "
    "9 s alone on this machine under load), DDP's import of torch._dynamo, a process group and the "
    "model: 10-20 s per recovery here. With `--warm-start` (see the command above) elasticrun's "
    "new workers are interpreters that imported torch and torch._dynamo ahead of time, while the "
    "job trained, and a joining node offers itself to the job only once its interpreter is ready "
    "(docs/warm-start.md): what is left of a start is the process group and the model.",
    "\"Goodput with worker starts left out\" takes the time new worker processes spent "
    "starting (interpreter, import torch, process group, model) out of the wall time. Without "
    "`--warm-start` a start costs the same under both launchers (on a repeated trace the longer "
    "job meets more events and starts more worker sets), and the figure compares what the "
    "launchers themselves do; with it, elasticrun's starts are mostly done ahead, so the figure "
    "mostly shows torchrun's other losses. It is derived, not measured.",
    "The worker leaves with `os._exit` after its resize checkpoint, after an error and at the "
    "end of the job, under both launchers: a Python process that imported torch takes about 3-5 s "
    "to tear down here, time the next round, or the end of the job, would wait for. torchrun's "
    "workers stopped with SIGTERM pay no teardown either.",
    "Workers run with `--pg-timeout 60` (process group start and collectives), for both "
    "launchers. With PyTorch's default of 30 minutes a torchrun job hangs that long when a node "
    "leaves while the next round's workers start: its agents watch only their own workers, which "
    "wait in init_process_group for a rank that never comes. A run whose workers write nothing "
    "for `--stall-s` seconds is stopped and reported as hung.",
    "Runs go one after the other on a 2-CPU machine that may be shared with other work (the load "
    "averages above): single runs of one launcher have differed by up to 6 points of goodput, "
    "mostly in how long worker starts took. `--runs N` runs each launcher N times, taking turns, "
    "and reports medians; the launcher's own part of a recovery (detection, rendezvous) is the "
    "steadier figure.",
    "Periodic checkpoints are written in the background under both launchers (the worker's "
    "CheckpointManager.save_async: the loop copies the state and trains on); the time counted as "
    "a periodic save is the copy, and the write's share of the CPUs shows in the steps it "
    "overlaps. `--sync-save` writes them in the loop, as before.",
]


METHOD_INPROCESS = [
    "With `--inprocess`, each round of elasticrun's job is one set of workers in the accounting "
    "whether its processes are new or went on from the round before: a survivor's start is the "
    "end of its park (the assignment arrived), its restart is the process group's start, and "
    "its checkpoint load is the state's broadcast from a peer (nothing is read from disk but at "
    "the job's start). Its stop ends when it parks, not when a process is gone. What the "
    "paragraphs above say of elasticrun's workers restarting holds only for the processes that "
    "must start: a joining node's and a killed worker's.",
]


def git_source() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return f"`{head}`" + (" with uncommitted changes" if dirty else "")
    except OSError:
        return "unknown"


def command_line(args) -> str:
    """The command that reproduces the report, with the default build's paths."""
    cmd = [".venv/bin/python bench/churn/churn_bench.py",
           "--elasticrun build/release/elasticrun --elasticctl build/release/elasticctl"]
    if Path(args.trace).resolve() != (HERE / "traces/steady.trace").resolve():
        cmd.append(f"--trace {os.path.relpath(Path(args.trace).resolve(), ROOT)}")
    for flag, value, default in (("--launchers", args.launchers, "elasticrun,torchrun"),
                                 ("--sample-s", args.sample_s, 0.006),
                                 ("--save-every", args.save_every, 50),
                                 ("--pg-timeout", args.pg_timeout, 60)):
        if value != default:
            cmd.append(f"{flag} {value}")
    if args.no_fixed:
        cmd.append("--no-fixed")
    if args.warm_start:
        cmd.append("--warm-start")
    if getattr(args, "inprocess", False):
        cmd.append("--inprocess")
    if getattr(args, "sync_save", False):
        cmd.append("--sync-save")
    if getattr(args, "memory_only", False):
        cmd.append("--memory-only")
    if getattr(args, "runs", 1) > 1:
        cmd.append(f"--runs {args.runs}")
    if getattr(args, "elasticrun_args", ""):
        cmd.append(f"--elasticrun-args {shlex.quote(args.elasticrun_args)}")
    return " ".join(cmd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=HERE / "traces/steady.trace")
    ap.add_argument("--quick", action="store_true",
                    help="traces/quick.trace (about a minute per launcher), no fixed run, no report")
    ap.add_argument("--elasticrun", default=str(ROOT / "build/release/elasticrun"))
    ap.add_argument("--elasticctl", default=str(ROOT / "build/release/elasticctl"))
    ap.add_argument("--torchrun", default=str(ROOT / ".venv/bin/torchrun"))
    ap.add_argument("--launchers", default="elasticrun,torchrun")
    ap.add_argument("--no-fixed", action="store_true", help="skip the fixed-size elasticrun run")
    ap.add_argument("--warm-start", action="store_true",
                    help="run elasticrun with --warm-start (docs/warm-start.md)")
    ap.add_argument("--inprocess", action="store_true",
                    help="elasticrun's workers re-form in process: --inprocess-restart with "
                         "examples/python/train_inprocess.py (docs/inprocess.md); torchrun's "
                         "still run train_elastic.py")
    ap.add_argument("--memory-only", action="store_true",
                    help="elasticrun's workers get no checkpoint directory: their state is in "
                         "the agents' memory tiers only (docs/memory-tier.md); torchrun's keep "
                         "theirs (bench/churn/memory_only_bench.py compares the two)")
    ap.add_argument("--elasticrun-args", default="",
                    help="more flags for every elasticrun agent, one string (e.g. the health "
                         "monitors': \"--hang-timeout 30 --config job.yaml\"); {n} in them "
                         "stands for the node's number")
    ap.add_argument("--sample-s", type=float, default=0.006, help="compute stand-in per local sample")
    ap.add_argument("--save-every", type=int, default=50, help="periodic checkpoint interval, steps")
    ap.add_argument("--sync-save", action="store_true",
                    help="the worker writes its periodic checkpoints in the loop, not in the background")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs per launcher, the launchers taking turns; the report gives medians "
                         "and the tables of each launcher's median run")
    ap.add_argument("--pg-timeout", type=float, default=60,
                    help="workers' process group timeout (init and collectives), seconds")
    ap.add_argument("--stall-s", type=float, default=240,
                    help="a run whose workers write nothing for this long is stopped as hung")
    ap.add_argument("--timeout", type=float, default=1200, help="per run, after the first step")
    ap.add_argument("--out", type=Path, default=ROOT / "build/churn")
    ap.add_argument("--json", type=Path, help="default: <out>/<trace>-<time>/churn.json")
    ap.add_argument("--report", type=Path, default=ROOT / "docs/benchmarks.md")
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--render", type=Path, nargs="+", metavar="JSON",
                    help="run nothing: write the report from the JSON file of an earlier run "
                         "(further files: other runs, listed in brief)")
    ap.add_argument("--reaccount", action="store_true",
                    help="with --render: account the first run's records again with this "
                         "accounting (its run directories beside the JSON), and update the JSON")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.render:
        saved, *others = [json.loads(f.read_text()) for f in args.render]
        if args.reaccount:
            reaccount(saved, args.render[0].parent)
            args.render[0].write_text(json.dumps(saved, indent=1, default=str))
        # Runs from before save_async wrote their periodic checkpoints in the loop.
        args.sync_save = True
        for key, value in saved["settings"].items():
            setattr(args, key, value)
        args.trace = Path(saved["trace"])
        trace = churn_trace.parse(args.trace.read_text(), args.trace.name)
        write_report(args, render(args, trace, saved["results"], saved["fixed"], saved["info"],
                                  others, runs=saved.get("runs")))
        return 0
    if args.quick:
        args.trace, args.no_fixed, args.no_report = HERE / "traces/quick.trace", True, True
    trace = churn_trace.parse(args.trace.read_text(), args.trace.name)
    stamp = datetime.datetime.now(datetime.timezone.utc)
    base = args.out.resolve() / f"{args.trace.stem}-{stamp:%Y%m%d-%H%M%S}"
    load_start = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    runs: dict[str, list[dict]] = {name: [] for name in args.launchers.split(",")}
    for i in range(args.runs):
        # Taking turns: a drift of the machine's load falls on both launchers.
        for launcher, done in runs.items():
            label = f"{launcher} (run {i + 1} of {args.runs})" if args.runs > 1 else launcher
            say(f"{label}: trace {args.trace.name}, {trace.nodes} nodes, {trace.samples:,} samples")
            sub = f"{launcher}-{i + 1}" if args.runs > 1 else launcher
            done.append(Run(launcher, trace, args, base / sub).execute())
            say(f"{label}: done in {done[-1]['wall_s']:.1f} s, goodput {done[-1]['goodput'] * 100:.1f}%")
    results = {name: median_run(done) for name, done in runs.items()}
    fixed = None
    if not args.no_fixed:
        steady = churn_trace.Trace(trace.name, trace.nnodes, trace.nodes, trace.samples, [])
        say(f"elasticrun: fixed-size run, {trace.nodes} nodes, no events")
        fixed = Run("elasticrun", steady, args, base / "fixed").execute()
    print()
    print(table(results, fixed))
    for name, res in results.items():
        print(f"\n{name}:")
        print(recovery_table(res))
        for n in res["notes"]:
            print(f"  note: {n}")
    info = {"started": f"{stamp:%Y-%m-%d %H:%M}", "source": git_source(),
            "command": command_line(args), "minutes": (time.time() - stamp.timestamp()) / 60,
            "nproc": os.cpu_count(), "load_start": load_start, "torch": importlib.metadata.version("torch"),
            "load_end": " / ".join(f"{x:.2f}" for x in os.getloadavg())}
    settings = {k: getattr(args, k) for k in ("launchers", "sample_s", "save_every", "pg_timeout",
                                               "no_fixed", "warm_start", "sync_save", "runs",
                                               "inprocess", "memory_only")}
    out_json = args.json or base / "churn.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps({"trace": str(args.trace.resolve()), "settings": settings,
                                    "info": info, "results": results, "runs": runs, "fixed": fixed},
                                   indent=1, default=str))
    say(f"JSON: {out_json}")
    if not args.no_report:
        write_report(args, render(args, trace, results, fixed, info, runs=runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
