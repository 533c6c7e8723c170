#!/usr/bin/env python3
"""Health monitors: detection latency per fault, and the agent's CPU with every monitor on.

Writes the "health" section of docs/benchmarks.md. Run from the repository
root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticrun elasticctl
    .venv/bin/python bench/health_bench.py              # 5 runs per fault, writes the section
    .venv/bin/python bench/health_bench.py --quick      # 2 runs, 10 s CPU windows, no report

Detection latency. Each run is one standalone job (`--nproc-per-node 2`,
`--log-dir` of its own, `--max-restarts` at its default 0, so the fault
fails the job) whose local rank 1 misbehaves on cue (workers in
bench/health/). The worker takes time.time() just before it misbehaves
(after its last line, for a log hang); the harness, on the same clock,
polls /proc every millisecond for the job's worker pids and stops the
clock when the last one is gone (exited; a zombie counts as gone). Then it
checks that <attempt>/fault.json exists, names the expected kind and lists
a stack file, non-empty, for every worker. The agent's part is the total
less the configured limit: the monitor's sampling (`--monitor-interval`,
0.1 s by default, left as a user gets it), the stack capture
(faulthandler, or py-spy for a stopped or non-SDK worker), the failure
record and the stop of both workers (SIGTERM; a stopped worker is killed
at once). Kinds:

- hang: rank 1 sleeps forever in its loop; `--hang-timeout 5`.
- stopped: rank 1 SIGSTOPs itself; `--hang-timeout 5`.
- hang in all_reduce: gloo, rank 1 never enters the step's all_reduce, rank
  0 blocks in it; `--hang-timeout 5` (the only standalone case with torch).
- non-finite loss: rank 1 passes a NaN loss to elasticrun.step() once.
- log fault: a non-SDK worker prints "RuntimeError: CUDA out of memory" to
  rank 1's stderr; one faultOnMatch rule.
- log hang: a non-SDK worker prints ten HyperPod "[Epoch 0 Batch N ...]"
  lines on rank 0, then none; HyperPod's JobHangingDetection pattern with
  expectedRecurringFrequencyInSeconds 5.
- survivor release: a dynamic job of two agents (127.0.0.1 and 127.0.0.2,
  one gloo worker each, around `elasticctl store`), rank 1 SIGSTOPs itself
  at step 20; the figure is from the stop to the moment rank 0's blocked
  all_reduce raises (the SDK's release), both taken by the workers.

The peers' figures are their defaults as a user gets them. torchrun's is
measured once, on the hang case, up to a bound (60 s); the others are
documented values (cited in the section).

Agent CPU. One standalone agent, `--nproc-per-node 8`, SDK workers stepping
every 50 ms (sleep inside elasticrun.compute(), a loss, one HyperPod-style
log line per step). Monitors on: `--hang-timeout 30 --startup-timeout 300`
and a job config with the four HyperPod rules of docs/job-config.md and one
more faultOnMatch rule, so every rank's output passes through the agent.
SDK monitors only: the same flags without the config (no output passes
through the agent). Monitors off: `--hang-timeout off --non-finite-loss
off`, no config (this build has no GPU monitor: docs/health.md's
`--gpu-health` is an unknown flag). Once every worker has stepped, the harness reads utime+stime of
the agent (all its threads) and of its death watch (the agent's forked
child) from /proc/<pid>/stat at the start and end of a 60 s window.

Every process runs with a marker variable in its environment (workers and
the death watch inherit it); after each run the harness scans /proc for it,
reports what outlived its launcher, and kills it in a finally block.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "bench" / "health"
SDK_WORKER = WORKERS / "sdk_worker.py"
LOG_WORKER = WORKERS / "log_worker.py"
SURVIVOR_WORKER = WORKERS / "survivor_worker.py"
MARKER_VAR = "ELASTICRUN_HEALTH_BENCH_MARKER"
PR_SET_PDEATHSIG = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")

HANG_S = 5.0
TORCHRUN_BOUND_S = 60.0
RDZV_CONF = "heartbeat_interval=0.2,missed_heartbeats=5,last_call_timeout=0.5"

# HyperPod's documented rules (docs/job-config.md), verbatim, and one more
# faultOnMatch rule; the worker's lines match the first three and never
# trip them (a start line at once, batches every 50 ms at 1000 samples/s).
CPU_RULES = r"""runPolicy:
  logMonitoringConfiguration:
    - name: "JobStart"
      logPattern: ".*Experiment configuration.*"
      expectedStartCutOffInSeconds: 120
    - name: "JobHangingDetection"
      logPattern: ".*\\[Epoch 0 Batch \\d+.*'training_loss_step': (\\d+(\\.\\d+)?).*"
      expectedRecurringFrequencyInSeconds: 300
      expectedStartCutOffInSeconds: 600
    - name: "LowThroughputDetection"
      logPattern: ".*\\[Epoch 0 Batch \\d+.*'samples\\/sec': (\\d+(\\.\\d+)?).*"
      metricThreshold: 80
      operator: "lteq"
      metricEvaluationDataPoints: 25
    - name: "GPU Error"
      logPattern: ".*RuntimeError.*out of memory.*"
      faultOnMatch: true
    - name: "NCCL Error"
      logPattern: ".*NCCL error.*"
      faultOnMatch: true
"""
OOM_RULE = """runPolicy:
  logMonitoringConfiguration:
    - name: "GPU Error"
      logPattern: ".*CUDA out of memory.*"
      faultOnMatch: true
"""
LOG_HANG_RULE = r"""runPolicy:
  logMonitoringConfiguration:
    - name: "JobHangingDetection"
      logPattern: ".*\\[Epoch 0 Batch \\d+.*'training_loss_step': (\\d+(\\.\\d+)?).*"
      expectedRecurringFrequencyInSeconds: 5
"""


class BenchError(Exception):
    pass


@dataclass
class Kind:
    key: str
    label: str
    worker: Path
    flags: list
    worker_args: list
    limit: float
    fault_kind: str
    config: str | None = None
    torch: bool = False


KINDS = [
    Kind("hang", "hang (sleeps in the loop)", SDK_WORKER, ["--hang-timeout", str(HANG_S)],
         ["--mode", "hang"], HANG_S, "hang"),
    Kind("stopped", "stopped (SIGSTOP)", SDK_WORKER, ["--hang-timeout", str(HANG_S)],
         ["--mode", "stop"], HANG_S, "hang"),
    Kind("allreduce", "hang in all_reduce (gloo, a rank never enters it)", SDK_WORKER,
         ["--hang-timeout", str(HANG_S)], ["--mode", "allreduce", "--torch"], HANG_S, "hang",
         torch=True),
    Kind("nan", "non-finite loss (NaN)", SDK_WORKER, [], ["--mode", "nan"], 0.0,
         "non_finite_loss"),
    Kind("log_fault", "log fault (faultOnMatch, \"CUDA out of memory\" on stderr, no SDK)",
         LOG_WORKER, [], ["--mode", "oom", "--rank", "1"], 0.0, "log_fault", config=OOM_RULE),
    Kind("log_hang", "log hang (expectedRecurringFrequencyInSeconds 5, the lines stop, no SDK)",
         LOG_WORKER, [], ["--mode", "lines", "--rank", "0", "--lines", "10"], 5.0, "log_hang",
         config=LOG_HANG_RULE),
]

# The peers' defaults, per kind: torchrun, ft_launcher, the backend.
PEERS = {
    "hang": ("not detected within {bound} s (measured)",
             "45 min (60 min before the first heartbeat) up to v0.5.0; none since", "-"),
    "stopped": ("never: nothing exits", "as for a hang", "-"),
    "allreduce": ("30 min: gloo's timeout raises in rank 0, which exits",
                  "gloo's 30 min first (heartbeats 45 min up to v0.5.0; none since)",
                  "gloo 30 min, NCCL 10 min"),
    "nan": ("never", "never: no loss monitor", "-"),
    "log_fault": ("never: the process keeps running", "never: no live log rules", "-"),
    "log_hang": ("never", "never: no live log rules", "-"),
    "survivor": ("30 min: gloo's timeout", "gloo's 30 min first (heartbeats 45 min up to "
                 "v0.5.0; none since)", "gloo 30 min, NCCL 10 min"),
}


# --- processes


def _preexec():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def marked_pids(marker: str) -> list[int]:
    """Live processes (zombies have no environment) that carry the marker."""
    needle = f"{MARKER_VAR}={marker}".encode()
    me = os.getpid()
    return [int(d) for d in os.listdir("/proc")
            if d.isdigit() and int(d) != me and _environ_has(int(d), needle)]


def wait_marked_gone(marker: str, timeout: float, exclude: set[int] = frozenset()) -> list[str]:
    """Descriptions of the marked processes (less exclude) still there after
    timeout; empty as soon as none is."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in marked_pids(marker) if p not in exclude]
        if not left or time.monotonic() > deadline:
            return [f"pid {p}: {_cmdline(p)}" for p in left]
        time.sleep(0.05)


def kill_marked(marker: str) -> None:
    for pid in marked_pids(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def pid_gone(pid: int) -> bool:
    """True once the process has exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return out


def wait_for(pred, timeout: float, poll: float = 0.001):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    return None


class Job:
    """The processes of one run, each leading its own session, and the files
    they write; every process and every worker is killed by stop()."""

    def __init__(self, root: Path, name: str, marker: str):
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        self.events_dir = self.dir / "events"
        self.events_dir.mkdir()
        self.marker = marker
        self.procs: dict[str, subprocess.Popen] = {}

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TORCHELASTIC_", "PET_", "TORCH_ELASTIC_", "ELASTICRUN_"))
               and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "PYTHONPATH", "LOGLEVEL")}
        env["PATH"] = f"{ROOT / '.venv/bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        env["PYTHONPATH"] = str(ROOT / "python")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["OMP_NUM_THREADS"] = "1"
        tmp = self.dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp)
        env[MARKER_VAR] = self.marker
        env.update(extra)
        return env

    def start(self, name: str, argv: list, env: dict | None = None) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "wb")
        p = subprocess.Popen([str(a) for a in argv], env=env or self.env(),
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=_preexec, cwd=self.dir)
        log.close()
        self.procs[name] = p
        return p

    def log(self, name: str, tail: int = 3000) -> str:
        try:
            return (self.dir / f"{name}.log").read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def events(self, kind: str | None = None) -> list[dict]:
        path = self.events_dir / "events.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line being written
            if kind is None or e["event"] == kind:
                out.append(e)
        return out

    def wait_exit(self, timeout: float, names: list[str] | None = None) -> bool:
        """Waits until the named processes (all by default) have exited."""
        deadline = time.monotonic() + timeout
        for name, p in self.procs.items():
            if names is not None and name not in names:
                continue
            try:
                p.wait(timeout=max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def terminate(self, name: str, timeout: float = 30) -> bool:
        """SIGTERM to one launcher's process group, as a user's Ctrl-C or a
        scheduler would send; True if it exited within timeout."""
        try:
            os.killpg(self.procs[name].pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        return self.wait_exit(timeout, [name])

    def stop(self) -> None:
        # Launchers first (they stop their workers), then anything marked.
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + 15
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
        kill_marked(self.marker)
        wait_marked_gone(self.marker, 5)


# --- detection latency


def check_fault_files(log_dirs: list[Path], expected: str, nworkers: int) -> tuple[bool, str]:
    """(ok, how) from the attempt's fault.json files under log_dirs."""
    records = [json.loads(p.read_text()) for d in log_dirs for p in d.glob("*/attempt_0/fault.json")]
    if not records:
        return False, "no fault.json"
    hows = set()
    for rec in records:
        stacks = rec.get("stacks") or []
        files = [Path(s["file"]) for s in stacks if s.get("file")]
        if rec.get("kind") != expected or len(files) < nworkers or not all(
                f.exists() and f.stat().st_size > 0 for f in files):
            return False, f"{rec.get('kind')}, {len(files)} stack file(s)"
        hows.update(s.get("how", "?") for s in stacks)
    return True, "+".join(sorted(hows))


def detect_standalone(kind: Kind, args, root: Path, marker: str, i: int) -> dict:
    job = Job(root, f"{kind.key}-{i}", marker)
    logs = job.dir / "logs"
    flags = list(kind.flags)
    if kind.config:
        cfg = job.dir / "job.yaml"
        cfg.write_text(kind.config)
        flags += ["--config", cfg]
    try:
        agent = job.start("agent", [args.elasticrun, "--standalone", "--nproc-per-node", "2",
                                    "--log-dir", logs, *flags, kind.worker, job.events_dir,
                                    *kind.worker_args])
        fault = wait_for(lambda: job.events("fault"), args.timeout, 0.01)
        if not fault:
            raise BenchError(f"{kind.key}: no fault within {args.timeout:.0f} s\n" + job.log("agent"))
        t_fault = fault[0]["t"]
        pids = [e["pid"] for e in job.events("start")]
        if len(pids) != 2:
            raise BenchError(f"{kind.key}: {len(pids)} workers started")
        bound = kind.limit + args.timeout
        if not wait_for(lambda: all(pid_gone(p) for p in pids), bound):
            return {"total": None, "detected": False, "leftover": [], "ok": False,
                    "how": f"not stopped within {bound:.0f} s"}
        t_gone = time.time()
        exited = job.wait_exit(30, ["agent"])
        t_exit = time.time()
        leftover = wait_marked_gone(marker, 10) if exited else ["the agent did not exit"]
        ok, how = check_fault_files([logs], kind.fault_kind, 2)
        return {"total": t_gone - t_fault, "agent_exit": t_exit - t_fault, "detected": True,
                "rc": agent.returncode, "ok": ok, "how": how, "leftover": leftover}
    finally:
        job.stop()


def start_store(job: Job, elasticctl: str) -> int:
    p = job.start("store", [elasticctl, "store", "--host", "127.0.0.1", "--port", "0"])

    def port():
        for line in job.log("store").splitlines():
            if "listening on 127.0.0.1:" in line:
                return int(line.rsplit(":", 1)[1].split()[0])
        if p.poll() is not None:
            raise BenchError("elasticctl store exited:\n" + job.log("store"))
        return None

    got = wait_for(port, 20, 0.01)
    if not got:
        raise BenchError("elasticctl store did not report its port:\n" + job.log("store"))
    return got


def detect_survivor(args, root: Path, marker: str, i: int) -> dict:
    job = Job(root, f"survivor-{i}", marker)
    try:
        port = start_store(job, args.elasticctl)
        run_id = f"health-{os.getpid()}-{i}"
        for n in (1, 2):
            job.start(f"agent{n}", [
                args.elasticrun, "--nnodes", "2:2", "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", run_id, "--local-addr", f"127.0.0.{n}", "--rdzv-conf", RDZV_CONF,
                "--scaling-timeout", "1", "--min-stable-period", "0",
                "--hang-timeout", str(HANG_S), "--log-dir", job.dir / f"logs{n}",
                SURVIVOR_WORKER, job.events_dir])
        fault = wait_for(lambda: job.events("fault"), args.timeout * 2, 0.01)
        if not fault:
            raise BenchError("survivor: no fault\n" + job.log("agent1") + job.log("agent2"))
        released = wait_for(lambda: job.events("released"), HANG_S + args.timeout, 0.005)
        if not released:
            return {"total": None, "detected": False, "ok": False, "leftover": [],
                    "how": "rank 0 not released"}
        total = released[0]["t"] - fault[0]["t"]
        # --max-restarts is 0 (its default): the fault fails the job, and
        # both agents exit.
        exited = job.wait_exit(args.timeout, ["agent1", "agent2"])
        leftover = (wait_marked_gone(marker, 10, exclude={job.procs["store"].pid}) if exited else
                    [f"agent{n} did not exit" for n in (1, 2)
                     if job.procs[f"agent{n}"].poll() is None])
        ok, how = check_fault_files([job.dir / "logs1", job.dir / "logs2"], "hang", 1)
        return {"total": total, "detected": True, "ok": ok, "how": how,
                "error": released[0]["error"][:80], "leftover": leftover,
                "rc": [job.procs[f"agent{n}"].returncode for n in (1, 2)]}
    finally:
        job.stop()


def torchrun_hang(args, root: Path, marker: str) -> dict:
    job = Job(root, "torchrun-hang", marker)
    try:
        job.start("torchrun", [args.torchrun, "--standalone", "--nproc-per-node", "2",
                               SDK_WORKER, job.events_dir, "--mode", "hang"],
                  env=job.env(LOGLEVEL="WARNING"))
        fault = wait_for(lambda: job.events("fault"), args.timeout * 2, 0.01)
        if not fault:
            raise BenchError("torchrun: no fault\n" + job.log("torchrun"))
        pids = [e["pid"] for e in job.events("start")]
        bound = args.torchrun_bound
        left = bound - (time.time() - fault[0]["t"])
        if wait_for(lambda: all(pid_gone(p) for p in pids), max(0.0, left), 0.01):
            return {"detected": True, "total": time.time() - fault[0]["t"], "bound": bound}
        return {"detected": False, "bound": bound}
    finally:
        job.stop()


# --- agent CPU


CPU_CONFIGS = ("on", "no rules", "off")


def agent_cpu(args, root: Path, marker: str, config: str, window: float) -> dict:
    """config: "on" (every monitor), "no rules" (the SDK's monitors only: no
    output passes through the agent), "off"."""
    job = Job(root, f"cpu-{config.replace(' ', '-')}", marker)
    if config == "off":
        flags = ["--hang-timeout", "off", "--non-finite-loss", "off"]
    else:
        flags = ["--hang-timeout", "30", "--startup-timeout", "300"]
    if config == "on":
        cfg = job.dir / "job.yaml"
        cfg.write_text(CPU_RULES)
        flags += ["--config", cfg]
    try:
        agent = job.start("agent", [args.elasticrun, "--standalone", "--nproc-per-node", "8",
                                    *flags, SDK_WORKER, job.events_dir, "--mode", "none",
                                    "--print", "--step-s", "0.05"])
        def stepped() -> bool:
            if agent.poll() is not None:
                raise BenchError("cpu: the agent exited before its workers stepped\n"
                                 + job.log("agent"))
            return len(job.events("stepped")) >= 8

        if not wait_for(stepped, args.timeout * 3, 0.05):
            raise BenchError("cpu: 8 workers did not step\n" + job.log("agent"))
        workers = {e["pid"] for e in job.events("start")}
        exe = os.readlink(f"/proc/{agent.pid}/exe")
        watch = [c for c in children(agent.pid) if c not in workers
                 and os.readlink(f"/proc/{c}/exe") == exe]
        out = job.dir / "agent.log"

        def lines() -> int:
            with open(out, "rb") as f:
                return f.read().count(b"[Epoch 0 Batch")

        t0, a0, w0, l0 = time.monotonic(), cpu_ticks(agent.pid), sum(map(cpu_ticks, watch)), lines()
        time.sleep(window)
        t1, a1, w1, l1 = time.monotonic(), cpu_ticks(agent.pid), sum(map(cpu_ticks, watch)), lines()
        if agent.poll() is not None or job.events("fault"):
            raise BenchError("cpu: the job ended during the window\n" + job.log("agent"))
        leftover = (wait_marked_gone(marker, 10) if job.terminate("agent") else
                    ["the agent did not exit within 30 s of SIGTERM"])
        wall = t1 - t0
        return {"agent": (a1 - a0) / CLK_TCK / wall * 100, "watch": (w1 - w0) / CLK_TCK / wall * 100,
                "watch_found": len(watch), "lines_s": (l1 - l0) / wall, "window": wall,
                "leftover": leftover}
    finally:
        job.stop()


# --- report


def fmt_s(v: float) -> str:
    return f"{v:.2f} s"


def render(args, res, cpu, torch_res, info, command, started) -> str:
    L = ["# Health monitors: detection latency per fault, the agent's CPU", ""]
    L.append(f"Generated by `bench/health_bench.py` on {started:%Y-%m-%d %H:%M} UTC; medians of "
             f"{args.runs} run(s) per fault; source: {info['source']}.")
    L += ["", "Reproduce (from the repository root):", "", "```sh",
          "cmake --preset release && cmake --build --preset release --target elasticrun elasticctl",
          command, "```", ""]
    L.append(f"- Machine: {info['nproc']} CPUs ({info['cpu']}), {platform.platform()}; load average "
             f"{info['load_start']} at start, {info['load_end']} at end")
    L.append(f"- Binaries: {info['built']}; PyTorch {info['torch']}; py-spy {info['pyspy']}")
    L.append("")
    L.append("## Detection latency: from the fault to every worker of the job stopped, stacks recorded")
    L.append("")
    L.append("| fault | elasticrun (median; min - max) | its limit | the agent's part | "
             "fault.json, stacks (runs; how) | torchrun | ft_launcher defaults | the backend |")
    L.append("|---|---:|---:|---:|---|---|---|---|")
    labels = {k.key: (k.label, k.limit) for k in KINDS}
    labels["survivor"] = ("survivor release: a peer node's rank SIGSTOPped (dynamic, 2 agents, gloo); "
                          "until the survivor's all_reduce raises", HANG_S)
    for key, runs in res.items():
        label, limit = labels[key]
        got = [r["total"] for r in runs if r["total"] is not None]
        ok = sum(1 for r in runs if r["ok"])
        hows = sorted({r["how"] for r in runs if r["ok"]})
        bad = sorted({r["how"] for r in runs if not r["ok"]})
        stacks = f"{ok}/{len(runs)}" + (f"; {', '.join(hows)}" if hows else "") + (
            f"; failed: {', '.join(bad)}" if bad else "")
        tr, ft, backend = PEERS[key]
        if key == "hang" and torch_res is not None:
            tr = (f"not detected within {torch_res['bound']:.0f} s (measured)"
                  if not torch_res["detected"] else f"{torch_res['total']:.1f} s (measured)")
        elif key == "hang":
            tr = "not detected (not measured this run)"
        if got:
            med = statistics.median(got)
            missed = len(runs) - len(got)
            L.append(f"| {label} | **{fmt_s(med)}**; {min(got):.2f} - {max(got):.2f}"
                     + (f" ({missed} run(s) not detected)" if missed else "")
                     + f" | {limit:.0f} s | {fmt_s(med - limit)} | {stacks} | {tr} | {ft} | {backend} |")
        else:
            L.append(f"| {label} | not detected | {limit:.0f} s | - | {stacks} | {tr} | {ft} | {backend} |")
    L.append("")
    L.append("Runs (s): " + "; ".join(
        f"{key} " + ", ".join(f"{r['total']:.2f}" if r["total"] is not None else "-" for r in runs)
        for key, runs in res.items()) + ".")
    std = [r for key, runs in res.items() if key != "survivor" for r in runs
           if r.get("agent_exit") is not None]
    if std:
        extra = statistics.median([r["agent_exit"] - r["total"] for r in std])
        L.append(f"The agent itself exits a median {extra * 1e3:.0f} ms after the last worker is gone "
                 "(standalone kinds).")
    left = [f"{key}: {x}" for key, runs in res.items() for r in runs for x in r["leftover"]]
    L.append("")
    L.append("Processes left after the agent's exit: " + ("none." if not left else
                                                         "; ".join(left) + "."))
    L.append("")
    L.append("## The agent's CPU with every monitor on")
    L.append("")
    on = cpu.get("on")
    L.append("| monitors | agent | its death watch | total, % of one core | log lines/s "
             "(8 ranks) | target |")
    L.append("|---|---:|---:|---:|---:|---|")
    rows = (("every monitor on", "on", "< 1% of a core"),
            ("the SDK's monitors only (hang, start-up, non-finite loss), no log rules",
             "no rules", "-"),
            ("every monitor off", "off", "-"))
    for label, name, target in rows:
        r = cpu.get(name)
        if r is None:
            continue
        total = r["agent"] + r["watch"]
        met = "" if name != "on" else (" (met)" if round(total, 2) < 1 else " (not met)")
        L.append(f"| {label} | {r['agent']:.2f}% | {r['watch']:.2f}% | **{total:.2f}%** | "
                 f"{r['lines_s']:.0f} | {target}{met} |")
    L.append("")
    window = on["window"] if on else args.window
    L.append("## Method, and what to keep in mind")
    L.append("")
    notes = [
        "Detection: one standalone job per run, `--nproc-per-node 2`, workers in bench/health/ "
        "(plain Python on the SDK, torch only for the all_reduce case; the log cases without the "
        "SDK). Local rank 1 misbehaves at step 5 (the log hang: rank 0 stops printing after ten "
        "lines), taking time.time() just before; the harness polls /proc each millisecond for "
        "the two worker pids and stops the clock when both are gone. Then each run's "
        "`<attempt>/fault.json` must name the expected kind and list a non-empty stack file for "
        "every worker (the stacks column; `faulthandler`: the SDK's own dump, `py-spy`: read by "
        "py-spy, for a stopped or non-SDK worker).",
        "The agent's part is the total less the limit: the monitor's sampling (`--monitor-interval` "
        "0.1 s, its default), the stack capture, the fault record and the stop of both workers "
        "(SIGTERM, which these workers do not catch; a stopped worker is killed at once). "
        "Of that part, the agent signals the SDK workers' faulthandlers (py-spy runs for the "
        "others) and stops the workers once each stack file has grown and settled (it looks "
        "every 5 ms, at most 300 ms: `kStackGrace`, src/agent/attempt.cpp); the fault is "
        "published (the survivors' release) before that wait. `--hang-timeout` was 5 s; by "
        "default it is `auto` "
        "(10 times the slowest recent step, never below 30 minutes).",
        "Survivor release: `elasticctl store --host 127.0.0.1 --port 0`, two agents "
        "(`--nnodes 2:2 --nproc-per-node 1 --local-addr 127.0.0.1` / `127.0.0.2`, `--rdzv-conf "
        f"{RDZV_CONF} --scaling-timeout 1 --min-stable-period 0 --hang-timeout 5`), one gloo "
        "worker each; rank 1 SIGSTOPs itself at step 20 of the first round, rank 0 blocks in "
        "that step's all_reduce and records when it raises (both times taken by the workers). "
        "Either node's hang monitor may fire first (both ranks stopped at the same step); the "
        "stacks column counts runs with a hang fault.json.",
        f"torchrun: the hang case under `.venv/bin/torchrun --standalone --nproc-per-node 2`, "
        f"once, bounded at {args.torchrun_bound:.0f} s: it watches only for exits. With gloo a "
        "rank blocked in a collective raises after the process group's timeout "
        "(`torch.distributed.constants.default_pg_timeout`, 30 min; NCCL "
        "`default_pg_nccl_timeout`, 10 min) and then exits, which is when torchrun sees it.",
        "ft_launcher (NVIDIA/nvidia-resiliency-ext): a rank that stops sending heartbeats fails "
        "after `initial_rank_heartbeat_timeout = 60.0 * 60.0` before its first heartbeat and "
        "`rank_heartbeat_timeout = 45.0 * 60.0` after it "
        "(src/nvidia_resiliency_ext/fault_tolerance/config.py, up to v0.5.0); commit e45953c "
        "(2026-03-04, \"Simplify ft_launcher default settings\", first in v0.6.0) makes both "
        "`None`: no hang is detected unless the user sets a timeout. It has no loss monitor and "
        "no live log rules (its attribution module reads a failed job's logs afterwards).",
        f"Agent CPU: one standalone agent, `--nproc-per-node 8`, SDK workers stepping every "
        "50 ms (a 50 ms sleep in `elasticrun.compute()`, a loss, one HyperPod-style "
        "`[Epoch 0 Batch N ...]` line per step). On: `--hang-timeout 30 --startup-timeout 300` "
        "and a job config with the four HyperPod rules of docs/job-config.md plus a second "
        "faultOnMatch rule, so every rank's output passes through the agent; the non-finite "
        "loss monitor at its default (on). Off: `--hang-timeout off --non-finite-loss off`, "
        "no config: the workers write to the agent's stdout directly; the middle row is "
        "`--hang-timeout 30 --startup-timeout 300` without the config, to tell the monitors' "
        "cost from the output's passage through the agent. There is no GPU here: GPU health "
        "(`--gpu-health auto`, the default) looks once, says it is skipped and reads nothing, "
        "so its thread's cost (every GPU read through NVML every 5 s) is not in these figures. "
        "Once all 8 workers had stepped, utime+stime "
        f"of the agent (all threads) and of its death watch (its forked child) from "
        f"/proc/<pid>/stat over {window:.0f} s, one window each, at {CLK_TCK} ticks per second.",
        "The machine is shared and has 2 CPUs for 8 workers and the agent: the figures are "
        "what the agent used, not what it waited for.",
    ]
    for n in notes:
        L.append(f"- {n}")
    L.append("")
    return "\n".join(L)


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elasticrun", default=os.environ.get("ELASTICRUN",
                                                           str(ROOT / "build/release/elasticrun")))
    ap.add_argument("--elasticctl", default=os.environ.get("ELASTICCTL",
                                                           str(ROOT / "build/release/elasticctl")))
    ap.add_argument("--torchrun", default=str(ROOT / ".venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--window", type=float, default=60.0, help="CPU window, s")
    ap.add_argument("--torchrun-bound", type=float, default=TORCHRUN_BOUND_S)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per wait (bounds hangs)")
    ap.add_argument("--only", default="", help="comma-separated: kinds, survivor, torchrun, cpu")
    ap.add_argument("--quick", action="store_true", help="2 runs, 10 s CPU windows, no report")
    ap.add_argument("--output", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.window, args.torchrun_bound = 2, 10.0, 10.0
    if args.output is None:
        args.output = Path("-") if args.quick or args.only else ROOT / "docs/benchmarks.md"
    # Launchers run in their job's directory.
    args.elasticrun, args.elasticctl, args.torchrun = (
        os.path.abspath(a) for a in (args.elasticrun, args.elasticctl, args.torchrun))
    for path in (args.elasticrun, args.elasticctl):
        if not os.access(path, os.X_OK):
            ap.error(f"{path} is not an executable; build it first (or set $ELASTICRUN)")
    only = set(filter(None, args.only.split(",")))
    want = lambda what: not only or what in only  # noqa: E731

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = ".venv/bin/python bench/health_bench.py" + "".join(
        " " + shlex.quote(a) for a in argv)
    pyspy = subprocess.run([str(ROOT / ".venv/bin/py-spy"), "--version"], text=True,
                           capture_output=True).stdout.split()[-1:] or ["?"]
    info = {"nproc": os.cpu_count(), "cpu": cpu_model(), "source": source_state(),
            "load_start": " / ".join(f"{x:.2f}" for x in os.getloadavg()), "pyspy": pyspy[0]}
    # HEAD can move while a build or a run goes on: the binary's own time
    # says which commits it can hold.
    built = datetime.datetime.fromtimestamp(os.stat(args.elasticrun).st_mtime,
                                            datetime.timezone.utc)
    info["built"] = f"`{os.path.relpath(args.elasticrun, ROOT)}` linked {built:%Y-%m-%d %H:%M} UTC"
    started = datetime.datetime.now(datetime.timezone.utc)
    marker = uuid.uuid4().hex
    res: dict[str, list[dict]] = {}
    cpu: dict[str, dict] = {}
    torch_res = None
    try:
        with tempfile.TemporaryDirectory(prefix="health-bench-") as d:
            root = Path(d)
            kinds = [k for k in KINDS if want(k.key) or want("kinds")]
            # Runs go round the kinds, so a change of the machine's load hits all alike.
            for i in range(args.runs):
                for kind in kinds:
                    r = detect_standalone(kind, args, root, marker, i)
                    res.setdefault(kind.key, []).append(r)
                    print(f"run {i + 1}/{args.runs} {kind.key:9s} "
                          + (f"{r['total']:6.2f} s" if r["total"] is not None else "not detected")
                          + f"  agent exit +{(r.get('agent_exit') or 0) - (r['total'] or 0):.3f} s"
                          f"  rc {r.get('rc')}  stacks {'ok' if r['ok'] else 'MISSING'} ({r['how']})"
                          + (f"  LEFT: {r['leftover']}" if r["leftover"] else ""), flush=True)
                if want("survivor"):
                    r = detect_survivor(args, root, marker, i)
                    res.setdefault("survivor", []).append(r)
                    print(f"run {i + 1}/{args.runs} survivor  "
                          + (f"{r['total']:6.2f} s" if r["total"] is not None else "not released")
                          + f"  stacks {'ok' if r['ok'] else 'MISSING'} ({r['how']})"
                          f"  rc {r.get('rc')}  error {r.get('error', '')!r}"
                          + (f"  LEFT: {r['leftover']}" if r["leftover"] else ""), flush=True)
            if want("torchrun"):
                torch_res = torchrun_hang(args, root, marker)
                print("torchrun hang: " + (f"stopped after {torch_res['total']:.1f} s"
                                           if torch_res["detected"] else
                                           f"not detected within {torch_res['bound']:.0f} s"),
                      flush=True)
            if want("cpu"):
                for name in CPU_CONFIGS:
                    r = agent_cpu(args, root, marker, name, args.window)
                    cpu[name] = r
                    print(f"cpu monitors {name:8s}: agent {r['agent']:.2f}%  death watch "
                          f"{r['watch']:.2f}% ({r['watch_found']} found)  {r['lines_s']:.0f} "
                          "lines/s" + (f"  LEFT: {r['leftover']}" if r["leftover"] else ""),
                          flush=True)
    finally:
        kill_marked(marker)
        left = wait_marked_gone(marker, 5)
        if left:
            print("still running after cleanup:\n  " + "\n  ".join(left), file=sys.stderr)
    info["load_end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        import torch  # noqa: PLC0415 (only for the version line)
        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = "?"
    if str(args.output) != "-":
        if set(res) != {k.key for k in KINDS} | {"survivor"} or set(cpu) != set(CPU_CONFIGS):
            print("partial run: no report written", file=sys.stderr)
            return 1
        write_section(args.output, "health", render(args, res, cpu, torch_res, info, command, started))
        print(f"wrote {args.output} (health section)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"health_bench: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
