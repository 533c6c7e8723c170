"""elasticrun vs torchrun: launch overhead, restart latency, agent memory.

Writes the "launcher" section of docs/benchmarks.md. Run from the repository
root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticrun
    .venv/bin/python bench/launcher_bench.py [--runs 5] [--quick]

- Launch overhead: `--standalone --nproc-per-node 8 --no-python /bin/true`,
  wall time from start to exit.
- Restart latency: 8 `bash` workers, --max-restarts 1; the harness SIGKILLs
  local rank 3 and measures until all 8 workers of the next attempt have
  written their start marker. Markers are written by the workers
  themselves, so the figure includes fork/exec of a shell, nothing else.
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


def restart_latency(cmd: list[str], env: dict, tmp: Path) -> float:
    """Seconds from SIGKILL of one worker until all 8 of the next attempt run."""
    script = tmp / "worker.sh"
    script.write_text(WORKER)
    script.chmod(0o755)
    mk = tmp / f"markers_{time.monotonic_ns()}"
    e = dict(env, MARKERS=str(mk))
    agent = subprocess.Popen(cmd + ["--standalone", "--nproc-per-node", "8", "--max-restarts", "1",
                                    "--shutdown-timeout", "5", "--no-python", str(script)],
                             env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        if not wait_for(lambda: len([m for m in markers(mk) if m[0] == 0]) == 8, 120):
            raise RuntimeError("first attempt did not start 8 workers")
        victim = next(m[2] for m in markers(mk) if m[0] == 0 and m[1] == 3)
        t0 = time.time()
        os.kill(victim, signal.SIGKILL)
        if not wait_for(lambda: len([m for m in markers(mk) if m[0] == 1]) == 8, 120):
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
    args = ap.parse_args()
    runs = 2 if args.quick else args.runs
    env = env_with_venv()
    tools = {"elasticrun": [args.elasticrun], "torchrun": [args.torchrun]}
    res: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, cmd in tools.items():
            launch = [launch_time(cmd, env) for _ in range(runs)]
            restart = [restart_latency(cmd, env, tmp) for _ in range(runs)]
            rss = [peak_rss_mb(cmd, env) for _ in range(max(1, runs // 2))]
            res[name] = {"launch": statistics.median(launch), "restart": statistics.median(restart),
                         "rss": statistics.median(rss)}
            print(f"{name:10s} launch {res[name]['launch'] * 1e3:8.1f} ms  restart "
                  f"{res[name]['restart'] * 1e3:8.1f} ms  peak RSS {res[name]['rss']:7.1f} MB",
                  flush=True)
    o, t = res["elasticrun"], res["torchrun"]
    import torch  # noqa: PLC0415 (only for the version line)

    body = f"""# Launcher benchmark: `elasticrun` vs `torchrun`

Generated by `bench/launcher_bench.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};
medians of {runs} run(s). Machine: {os.cpu_count()} CPUs, {platform.platform()}; torch {torch.__version__}.

Reproduce:

```sh
cmake --preset release && cmake --build --preset release --target elasticrun
.venv/bin/python bench/launcher_bench.py
```

| measure | elasticrun | torchrun | torchrun / elasticrun | target |
|---|---:|---:|---:|---|
| launch: `--standalone --nproc-per-node 8 --no-python /bin/true`, wall time | {o['launch'] * 1e3:.1f} ms | {t['launch'] * 1e3:.0f} ms | **{t['launch'] / o['launch']:.0f}x** | >= 20x |
| restart: 1 of 8 workers SIGKILLed until all 8 run again (`--max-restarts 1`) | {o['restart'] * 1e3:.1f} ms | {t['restart'] * 1e3:.0f} ms | **{t['restart'] / o['restart']:.0f}x** | < 50 ms, >= 20x |
| agent peak RSS with 8 workers | {o['rss']:.1f} MB | {t['rss']:.0f} MB | {t['rss'] / o['rss']:.0f}x | < 10 MB |

- Launch time is dominated, for torchrun, by importing torch (about 3 s of
  its total here); elasticrun is a native binary that hosts the store in-process.
- Restart latency is measured from the harness's SIGKILL to the last start
  marker of the next attempt, written by each `bash` worker itself (with
  the `$EPOCHREALTIME` builtin, so no extra process); the
  survivors are stopped with SIGTERM first (both launchers do that), so the
  figure includes their exit. torchrun notices a failure only at its next
  poll (`--monitor-interval`, 0.1 s); elasticrun reacts to SIGCHLD.
- Peak RSS is the launcher process's VmHWM, sampled every 50 ms.
"""
    if not args.quick:
        write_section(ROOT / "docs/benchmarks.md", "launcher", body)
        print("wrote docs/benchmarks.md (launcher section)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
