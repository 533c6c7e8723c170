"""elasticrun vs torchrun: launch overhead, restart latency, agent memory.

Writes the "launcher" section of docs/benchmarks.md. Run from the repository
root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticrun
    .venv/bin/python bench/launcher_bench.py [--runs 5] [--quick]

- Launch overhead: `--standalone --nproc-per-node 8 --no-python /bin/true`,
  wall time from start to exit.
- Restart latency: 8 workers, --max-restarts 1; the harness SIGKILLs local
  rank 3 and measures until all 8 workers of the next attempt have written
  their start marker. Markers are written by the workers themselves, so
  the figure also holds each worker's own start. Measured twice: with a
  tiny static C worker whose first act is the marker (the launcher's part:
  the issue's "until all 8 run again"), and with the `bash` worker earlier
  reports used, whose start (about 3 ms of CPU each here, eight at once)
  is a large share of elasticrun's figure.
- Restart latency with PyTorch workers: the same, with a Python worker that
  imports torch before its marker, under torchrun, elasticrun, and
  elasticrun --warm-start (docs/warm-start.md). Before the kill the harness
  waits until the machine's CPUs are idle (the first attempt's imports, and
  --warm-start's interpreters for the restart, are done), for every
  launcher alike: restarts of a real job come minutes apart.
- Agent memory: peak RSS (VmHWM) of the launcher process with 8 sleeping
  workers, sampled from /proc until it exits (torchrun's is its Python
  process with torch imported).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# bash's $EPOCHREALTIME is a builtin: the marker costs no extra process, so
# the figure is the launchers' and one shell's start, not `date`'s.
WORKER = r"""#!/bin/bash
echo "$TORCHELASTIC_RESTART_COUNT $LOCAL_RANK $$ $EPOCHREALTIME" >> "$MARKERS"
exec sleep 60
"""

# A PyTorch worker: the marker once torch is imported, where a training
# script's own code begins.
TORCH_WORKER = r"""import os, time
import torch
with open(os.environ["MARKERS"], "a") as f:
    f.write(f"{os.environ['TORCHELASTIC_RESTART_COUNT']} {os.environ['LOCAL_RANK']} {os.getpid()} "
            f"{time.time():.6f}\n")
time.sleep(600)
"""

# The same marker from a static C program: no shell, no dynamic loader, so
# what is left of a worker's start is its exec. It then waits for a signal,
# as `sleep` does, and dies of the launcher's SIGTERM.
NATIVE_WORKER = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
  const char* rank = getenv("LOCAL_RANK");
  const char* path = getenv("MARKERS");
  if (!restart || !rank || !path) return 2;
  char line[128];
  int n = snprintf(line, sizeof line, "%s %s %d %lld.%06ld\n", restart, rank, (int)getpid(),
                   (long long)now.tv_sec, now.tv_nsec / 1000);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, line, (size_t)n) != n) return 3;
  close(fd);
  for (;;) pause();
}
"""


def build_native_worker(tmp: Path) -> Path | None:
    """Compiles NATIVE_WORKER with the system C compiler; None if there is none."""
    src = tmp / "worker.c"
    src.write_text(NATIVE_WORKER)
    exe = tmp / "worker"
    for static in (["-static"], []):
        r = subprocess.run(["cc", "-O2", *static, "-o", str(exe), str(src)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            return exe
    return None


def env_with_venv() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv/bin'}:{env.get('PATH', '')}"
    env.setdefault("LOGLEVEL", "WARNING")
    return env


def launch_time(cmd: list[str], env: dict) -> float:
    start = time.monotonic()
    subprocess.run(cmd + ["--standalone", "--nproc-per-node", "8", "--no-python", "/bin/true"],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - start


def markers(path: Path) -> list[tuple[int, int, int, float]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])))
    return out


def wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.002)
    return False


def cpu_busy(interval: float = 0.5) -> float:
    """Share of the machine's CPU time spent busy over `interval`."""
    def sample():
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(interval)
    t1, i1 = sample()
    return 1 - (i1 - i0) / max(t1 - t0, 1)


def settle(timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while cpu_busy() > 0.2 and time.monotonic() < deadline:
        pass


def restart_latency(cmd: list[str], env: dict, tmp: Path, worker: Path) -> float:
    """Seconds from SIGKILL of one worker until all 8 of the next attempt run."""
    mk = tmp / f"markers_{time.monotonic_ns()}"
    e = dict(env, MARKERS=str(mk))
    python = worker.suffix == ".py"
    agent = subprocess.Popen(cmd + ["--standalone", "--nproc-per-node", "8", "--max-restarts", "1",
                                    "--shutdown-timeout", "5",
                                    *([] if python else ["--no-python"]), str(worker)],
                             env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        if not wait_for(lambda: len([m for m in markers(mk) if m[0] == 0]) == 8, 300):
            raise RuntimeError("first attempt did not start 8 workers")
        if python:
            settle()
        victim = next(m[2] for m in markers(mk) if m[0] == 0 and m[1] == 3)
        t0 = time.time()
        os.kill(victim, signal.SIGKILL)
        if not wait_for(lambda: len([m for m in markers(mk) if m[0] == 1]) == 8, 300):
            raise RuntimeError("second attempt did not start 8 workers")
        return max(m[3] for m in markers(mk) if m[0] == 1) - t0
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


def peak_rss_mb(cmd: list[str], env: dict) -> float:
    agent = subprocess.Popen(cmd + ["--standalone", "--nproc-per-node", "8", "--no-python",
                                    "sleep", "3"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while agent.poll() is None:
        try:
            for line in Path(f"/proc/{agent.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.05)
    agent.wait()
    return peak / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elasticrun", default=str(ROOT / "build/release/elasticrun"))
    ap.add_argument("--torchrun", default=str(ROOT / ".venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 runs each, no report file")
    ap.add_argument("--torch-runs", type=int, default=3,
                    help="runs of the restart with PyTorch workers (tens of seconds each)")
    args = ap.parse_args()
    runs = 2 if args.quick else args.runs
    env = env_with_venv()
    tools = {"elasticrun": [args.elasticrun], "torchrun": [args.torchrun]}
    res: dict[str, dict[str, float]] = {name: {} for name in tools}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        script = tmp / "worker.sh"
        script.write_text(WORKER)
        script.chmod(0o755)
        workers = {"bash": script}
        native = build_native_worker(tmp)
        if native is not None:
            workers["native"] = native
        else:
            print("no C compiler: restart latency with the bash worker only", flush=True)
        for name, cmd in tools.items():
            res[name]["launch"] = statistics.median([launch_time(cmd, env) for _ in range(runs)])
            res[name]["rss"] = statistics.median([peak_rss_mb(cmd, env)
                                                  for _ in range(max(1, runs // 2))])
        # Restart runs alternate between the launchers, so that a change in the
        # machine's load during the run hits both alike.
        restart: dict[tuple[str, str], list[float]] = {}
        for _ in range(runs):
            for kind, worker in workers.items():
                for name, cmd in tools.items():
                    restart.setdefault((name, kind), []).append(
                        restart_latency(cmd, env, tmp, worker))
        torch_worker = tmp / "torch_worker.py"
        torch_worker.write_text(TORCH_WORKER)
        torch_tools = dict(tools, **{"elasticrun-warm": [args.elasticrun, "--warm-start"]})
        res["elasticrun-warm"] = {}
        for _ in range(2 if args.quick else args.torch_runs):
            for name, cmd in torch_tools.items():
                restart.setdefault((name, "torch"), []).append(
                    restart_latency(cmd, env, tmp, torch_worker))
        for (name, kind), values in restart.items():
            res[name][f"restart_{kind}"] = statistics.median(values)
            res[name][f"restart_{kind}_runs"] = values
        for name in tools:
            r = res[name]
            print(f"{name:10s} launch {r['launch'] * 1e3:8.1f} ms  restart "
                  + "  ".join(f"{kind} {r[f'restart_{kind}'] * 1e3:6.1f} ms" for kind in workers)
                  + f"  torch {r['restart_torch']:6.2f} s  peak RSS {r['rss']:7.1f} MB", flush=True)
        print(f"elasticrun --warm-start: restart torch {res['elasticrun-warm']['restart_torch']:6.2f} s")
    load_end = os.getloadavg()
    o, t, w = res["elasticrun"], res["torchrun"], res["elasticrun-warm"]
    import torch  # noqa: PLC0415 (only for the version line)

    def restart_row(kind: str, what: str, target: str) -> str:
        key = f"restart_{kind}"
        if key not in o:
            return ""
        return (f"| {what} | {o[key] * 1e3:.1f} ms | {t[key] * 1e3:.0f} ms | "
                f"**{t[key] / o[key]:.0f}x** | {target} |\n")

    restart_rows = (
        restart_row("native", "restart: 1 of 8 workers SIGKILLed until all 8 run again "
                    "(`--max-restarts 1`), static C workers", "< 50 ms, >= 20x")
        + restart_row("bash", "the same with `bash` workers (their start included)", "-")).rstrip("\n")
    runs_s = lambda r: ", ".join(f"{v:.2f}" for v in r["restart_torch_runs"])  # noqa: E731
    torch_rows = f"""| restart with PyTorch workers (marker after `import torch`), elasticrun | {o['restart_torch']:.2f} s | {t['restart_torch']:.2f} s | **{t['restart_torch'] / o['restart_torch']:.1f}x** | - |
| the same, elasticrun `--warm-start` | {w['restart_torch']:.2f} s | {t['restart_torch']:.2f} s | **{t['restart_torch'] / w['restart_torch']:.1f}x** | - |"""
    body = f"""# Launcher benchmark: `elasticrun` vs `torchrun`

Generated by `bench/launcher_bench.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};
medians of {runs} run(s). Machine: {os.cpu_count()} CPUs, {platform.platform()}; torch {torch.__version__}.
Load average (1/5/15 min) at start {' / '.join(f'{x:.2f}' for x in load_start)}, at end {' / '.join(f'{x:.2f}' for x in load_end)}.

Reproduce:

```sh
cmake --preset release && cmake --build --preset release --target elasticrun
.venv/bin/python bench/launcher_bench.py
```

| measure | elasticrun | torchrun | torchrun / elasticrun | target |
|---|---:|---:|---:|---|
| launch: `--standalone --nproc-per-node 8 --no-python /bin/true`, wall time | {o['launch'] * 1e3:.1f} ms | {t['launch'] * 1e3:.0f} ms | **{t['launch'] / o['launch']:.0f}x** | >= 20x |
{restart_rows}
{torch_rows}
| agent peak RSS with 8 workers | {o['rss']:.1f} MB | {t['rss']:.0f} MB | {t['rss'] / o['rss']:.0f}x | < 10 MB |

- Launch time is dominated, for torchrun, by importing torch; elasticrun is
  a native binary that hosts the store in-process.
- Restart latency is measured from the harness's SIGKILL to the last start
  marker of the next attempt, written by each worker itself. The survivors
  are stopped with SIGTERM first (both launchers do that), so the figure
  includes their exit; then come the launcher's new attempt (elasticrun: a
  fresh store, the attempt's directories, 8 spawns) and each worker's
  start up to its marker. torchrun notices a failure only at its next
  poll (`--monitor-interval`, 0.1 s); elasticrun reacts to SIGCHLD.
- The static C worker's start is its exec, nothing else: that row is the
  launchers' part, the one the target is about. A `bash` worker (marker by
  the `$EPOCHREALTIME` builtin, then `exec sleep`) costs about 3 ms of CPU
  to reach its marker on this machine, eight of them at once on its CPUs,
  which is most of elasticrun's figure in that row and little of torchrun's.
- The machine is shared: on a loaded host the figures stretch, elasticrun's
  (a few ms of CPU over many short steps) and torchrun's alike. Restart
  runs alternate between the launchers so that load changes hit both.
- Peak RSS is the launcher process's VmHWM, sampled every 50 ms.
- PyTorch workers: medians of {2 if args.quick else args.torch_runs} runs (seconds: torchrun {runs_s(t)};
  elasticrun {runs_s(o)}; --warm-start {runs_s(w)}). The harness waits for an
  idle machine before each kill. Without --warm-start both launchers start
  8 interpreters that import torch at once, which on 2 CPUs is most of the
  figure. With it, the restart's workers are interpreters that imported
  torch (and torch._dynamo) while the first attempt ran; what is left is
  the stop of the survivors, the spawn and the script's own start.
"""
    if not args.quick:
        write_section(ROOT / "docs/benchmarks.md", "launcher", body)
        print("wrote docs/benchmarks.md (launcher section)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
