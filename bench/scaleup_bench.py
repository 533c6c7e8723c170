#!/usr/bin/env python3
"""Scale-up latency: a third node joins a running 2-node job, elasticrun vs torchrun.

Run from the repository root after a release build (it needs .venv for torchrun):

    cmake --preset release && cmake --build --preset release --target elasticrun elasticctl
    .venv/bin/python bench/scaleup_bench.py             # 5 runs each, writes docs/benchmarks.md
    .venv/bin/python bench/scaleup_bench.py --quick     # 1 run each, no report

One run: an `elasticctl store` on 127.0.0.1, two agents with `--nnodes 2:3`
and one `bash` worker each (--no-python); once both workers run at
WORLD_SIZE 2, the harness starts a third agent and measures from just
before its exec until all three workers of the new round have started at
WORLD_SIZE 3. Workers write their own start markers (`$EPOCHREALTIME`, a
bash builtin) and the harness takes time.time(): one clock. A worker exits
0 at once on SIGTERM, so the old workers' stop costs no checkpoint time.

- elasticrun: `--rdzv-backend c10d --scaling-timeout 0 --min-stable-period 0
  --rdzv-conf heartbeat_interval=0.05,last_call_timeout=0.2
  --graceful-shutdown-timeout 5`. No configured window delays a scale-up;
  the leader notices the joiner when it next looks, at most one heartbeat
  interval (50 ms) after the join: reported separately as "detection".
- torchrun: the same store and worker, `--rdzv-backend c10d
  --monitor-interval 0.1 --rdzv-conf last_call_timeout=1,is_host=0` (1 s is
  the least last_call_timeout it accepts; the round closes as soon as the
  maximum has joined, so it does not apply here). Its agents look for
  waiting nodes at every monitor interval.

Every process runs in a process group of its own and is stopped (SIGTERM,
then SIGKILL) however a run ends; so are the workers, by the pids in their
markers.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1

# The marker's time is taken first, before the sleep is forked. The sleep's
# pid is in the marker so that cleanup can find it if the worker is killed.
WORKER = r"""#!/bin/bash
t=$EPOCHREALTIME
sleep 600 &
echo "start ${ELASTICRUN_GENERATION:-g$TORCHELASTIC_RESTART_COUNT} $WORLD_SIZE $RANK $$ $! $t" >> "$MARKERS"
trap 'kill $! 2>/dev/null; echo "stop - $WORLD_SIZE $RANK $$ - $EPOCHREALTIME" >> "$MARKERS"; exit 0' TERM
wait $!
"""


class BenchError(Exception):
    pass


class Marker:
    def __init__(self, line: str):
        f = line.split()
        self.kind, self.gen, self.world, self.rank = f[0], f[1], int(f[2]), int(f[3])
        self.pid = int(f[4])
        self.child = int(f[5]) if f[5] != "-" else None
        self.t = float(f[6])


def read_markers(path: Path) -> list[Marker]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(Marker(line))
        except (IndexError, ValueError):
            pass  # a line being written
    return out


def _preexec():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Procs:
    """Every process of one run, each leading its own process group."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=_preexec, cwd=ROOT)
        self.procs.append((name, p))
        return p

    def log(self, name: str) -> str:
        try:
            return (self.tmp / f"{name}.log").read_text(errors="replace")[-2500:]
        except OSError:
            return ""

    def log_head(self, name: str) -> str:
        try:
            return (self.tmp / f"{name}.log").read_text(errors="replace")[:20000]
        except OSError:
            return ""

    def stop_all(self, markers: Path) -> None:
        # Agents first (they stop their workers), the store last.
        for _, p in self.procs:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for _, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for _, p in self.procs:
            _signal_group(p.pid, signal.SIGKILL)
            p.wait()
        for m in read_markers(markers):
            for pid in (m.pid, m.child):
                if pid:
                    _signal_group(pid, signal.SIGKILL)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def torchrun_started(log: str) -> float | None:
    """Epoch time of torchrun's "Starting elastic_operator" line (glog format, local time)."""
    for line in log.splitlines():
        if "Starting elastic_operator" in line and len(line) > 21 and line[0] in "IWE":
            try:
                stamp = datetime.datetime.strptime(
                    f"{datetime.date.today().year}{line[1:5]} {line[6:21]}", "%Y%m%d %H:%M:%S.%f")
            except ValueError:
                return None
            return stamp.timestamp()
    return None


def wait_for(pred, timeout: float, poll: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(poll)
    return False


def start_store(procs: Procs, elasticctl: str, env: dict) -> int:
    p = procs.start("store", [elasticctl, "store", "--host", "127.0.0.1", "--port", "0"], env)
    port = None

    def listening() -> bool:
        nonlocal port
        for line in procs.log("store").splitlines():
            if "listening on 127.0.0.1:" in line:
                port = int(line.rsplit(":", 1)[1].split()[0])
                return True
        if p.poll() is not None:
            raise BenchError("elasticctl store exited:\n" + procs.log("store"))
        return False

    if not wait_for(listening, 20, 0.01):
        raise BenchError("elasticctl store did not report its port:\n" + procs.log("store"))
    return port


def one_run(tool: str, args, tmp_root: Path, i: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"{tool}-{i}-", dir=tmp_root))
    worker = tmp / "worker.sh"
    worker.write_text(WORKER)
    worker.chmod(0o755)
    markers = tmp / "markers"
    env = dict(os.environ, MARKERS=str(markers), LOGLEVEL="WARNING",
               PATH=f"{ROOT / '.venv/bin'}:{os.environ.get('PATH', '')}")
    procs = Procs(tmp)
    try:
        port = start_store(procs, args.elasticctl, env)
        run_id = f"scaleup-{tool}-{os.getpid()}-{i}"
        if tool == "elasticrun":
            base = [args.elasticrun, "--nnodes", "2:3", "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                    "--rdzv-id", run_id, "--scaling-timeout", "0", "--min-stable-period", "0",
                    "--rdzv-conf", f"heartbeat_interval={args.heartbeat},last_call_timeout=0.2",
                    "--graceful-shutdown-timeout", "5"]
        else:
            # TORCHELASTIC's shared TCPStore is off: with it, a node that joins a
            # running job waits forever for MASTER_ADDR (see the report).
            if not args.torch_share_store:
                env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
            base = [args.torchrun, "--nnodes", "2:3", "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                    "--rdzv-id", run_id, "--monitor-interval", str(args.torch_monitor),
                    "--rdzv-conf", "last_call_timeout=1,is_host=0"]
        tail = ["--no-python", str(worker)]
        for n in (1, 2):
            procs.start(f"agent{n}", base + ["--local-addr", f"127.0.0.{n}"] + tail, env)

        def running(world: int, after: float) -> list[Marker]:
            return [m for m in read_markers(markers)
                    if m.kind == "start" and m.world == world and m.t >= after]

        if not wait_for(lambda: len(running(2, 0)) >= 2, args.timeout, 0.01):
            raise BenchError(f"{tool}: the first two workers did not start within "
                             f"{args.timeout:.0f} s\n" + procs.log("agent1"))
        time.sleep(args.settle)  # the round's watch is up and has looked once at least
        t3 = time.time()
        # torchrun's INFO log says when its interpreter has imported torch and
        # the launcher starts; only the third agent's is needed.
        env3 = dict(env, LOGLEVEL="INFO") if tool == "torchrun" else env
        procs.start("agent3", base + ["--local-addr", "127.0.0.3"] + tail, env3)
        if not wait_for(lambda: len(running(3, t3)) >= 3, args.timeout):
            raise BenchError(f"{tool}: no 3 workers at WORLD_SIZE 3 within {args.timeout:.0f} s;"
                             f" markers:\n{markers.read_text() if markers.exists() else ''}\n"
                             f"agent1:\n{procs.log('agent1')}\nagent3:\n{procs.log('agent3')}")
        new = running(3, t3)
        stops = [m for m in read_markers(markers) if m.kind == "stop" and m.t >= t3]
        launcher_up = torchrun_started(procs.log_head("agent3")) if tool == "torchrun" else None
        return {
            "total": max(m.t for m in new) - t3,
            "import": (launcher_up - t3) if launcher_up else float("nan"),
            "old_stopped": max(m.t for m in stops) - t3 if stops else float("nan"),
            "new_spread": max(m.t for m in new) - min(m.t for m in new),
        }
    finally:
        procs.stop_all(markers)


def render(args, res, info, command, started) -> str:
    o, t = res["elasticrun"], res["torchrun"]
    om, tm = statistics.median(o["total"]), statistics.median(t["total"]) if t["total"] else None
    hb_ms = args.heartbeat * 1e3
    L = ["# Scale-up latency: a node joins a running job, `elasticrun` vs `torchrun`", ""]
    L.append(f"Generated by `bench/scaleup_bench.py` on {started:%Y-%m-%d %H:%M} UTC; medians of "
             f"{args.runs} run(s) each.")
    L.append("")
    L.append("Reproduce (from the repository root):")
    L.append("")
    L.append("```sh")
    L.append("cmake --preset release && cmake --build --preset release --target elasticrun elasticctl")
    L.append(command)
    L.append("```")
    L.append("")
    L.append(f"- Machine: {info['nproc']} CPUs ({info['cpu']}), {platform.platform()}; shared with "
             f"other work: load average {info['load_start']} at start, {info['load_end']} at end")
    L.append(f"- PyTorch {info['torch']}; both launchers use one `elasticctl store` on 127.0.0.1 as "
             "the rendezvous store")
    L.append(f"- Source: {info['source']}")
    L.append("")
    target = "met" if om < 0.2 else "not met"
    L.append(f"Target: under 200 ms from the third agent's start to all workers running at the new "
             f"size, less configured windows (none here: `--scaling-timeout 0`) and the workers' "
             f"checkpoint time (none: they exit at once): **{om * 1e3:.0f} ms**, {target}.")
    L.append("")
    L.append("| measure | elasticrun | torchrun | torchrun / elasticrun |")
    L.append("|---|---:|---:|---:|")

    def row(name, key, fmt="{:,.0f} ms", scale=1e3):
        ov = statistics.median(o[key])
        tv = statistics.median(t[key]) if t[key] else None
        ratio = f"{tv / ov:.0f}x" if tv and ov > 0 else "-"
        tv_s = fmt.format(tv * scale) if tv is not None and tv == tv else "-"
        ov_s = fmt.format(ov * scale) if ov == ov else "-"  # NaN: not measured
        L.append(f"| {name} | {ov_s} | {tv_s} | {ratio} |")

    row("third agent's exec until all 3 workers run at WORLD_SIZE 3 (median)", "total")
    L.append(f"| (min - max) | {min(o['total']) * 1e3:.0f} - {max(o['total']) * 1e3:.0f} ms | "
             + (f"{min(t['total']) * 1e3:,.0f} - {max(t['total']) * 1e3:,.0f} ms" if t["total"]
                else "-") + " | |")
    if tm is not None:
        nets = [a - b for a, b in zip(t["total"], t["import"]) if b == b]  # b == b: not NaN
        if nets:
            net = statistics.median(nets)
            L.append(f"| the same, from torchrun's launcher start (its \"Starting elastic_operator\" "
                     f"log line, after the import of torch) | {om * 1e3:.0f} ms | "
                     f"{net * 1e3:,.0f} ms | {net / om:.0f}x |")
    row("third agent's exec until its launcher starts (torchrun: imports torch)", "import")
    row("third agent's exec until the old workers have exited", "old_stopped")
    L.append(f"| detection: the leader sees the joiner (included above) | <= {hb_ms:.0f} ms (one "
             f"heartbeat interval) | <= {args.torch_monitor * 1e3:.0f} ms (one monitor interval) "
             "plus its state cache (up to 1 s) | |")
    L.append("")
    if tm is None:
        L.append(f"torchrun did not complete a scale-up: {res.get('torch_error', '')}")
        L.append("")
    L.append("## Method, and what to keep in mind")
    L.append("")
    notes = [
        "Per run: a fresh `elasticctl store`, two agents (`--local-addr 127.0.0.1` and "
        "`127.0.0.2`), one `bash` worker each; once both run at WORLD_SIZE 2 the harness "
        f"waits {args.settle:.1f} s, takes time.time() and starts the third agent "
        "(`--local-addr 127.0.0.3`). The figure ends at the last of the three new workers' "
        "start markers, written by the workers themselves with bash's `$EPOCHREALTIME`.",
        "What the figure includes, for both: the third agent's own start (for torchrun, a "
        "Python interpreter importing torch, timed by its own first INFO log line, at "
        "millisecond resolution: the second row shows the figure without it), its join as a waiting node, "
        "detection by the running agents, stopping the old workers (SIGTERM; they exit at "
        "once, so no checkpoint time), the new round's rendezvous, and spawning three workers.",
        f"elasticrun: `--scaling-timeout 0 --min-stable-period 0 --rdzv-conf "
        f"heartbeat_interval={args.heartbeat},last_call_timeout=0.2 "
        "--graceful-shutdown-timeout 5`. No configured window applies to this scale-up; "
        "`last_call_timeout` only bounds the first round. The leader checks for waiting "
        "agents once per heartbeat interval, so detection costs up to one interval; it is "
        "inside the figure, not subtracted.",
        f"torchrun: `--monitor-interval {args.torch_monitor} --rdzv-conf "
        "last_call_timeout=1,is_host=0` (1 s is the least `last_call_timeout` it accepts, as "
        "an integer; it does not delay this round, which closes when the third node makes "
        "the maximum). Its running agents call `num_nodes_waiting()` each monitor interval, "
        "which reads the rendezvous state at most once a second (its state cache), and "
        "nodes waiting in its rendezvous poll the state every second.",
        "torchrun ran with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`. With its default (rank 0 "
        "shares a TCPStore with the workers), the joining node waits for `MASTER_ADDR` under "
        "the new round's key prefix, which rank 0 writes only in its first round; the new "
        "node, and with it the whole job, stalls until the 60 s store timeout and the agents "
        "fail. Seen here with PyTorch " + info["torch"] + " (and with PyTorch's own store as "
        "well as ours)." if not args.torch_share_store else
        "torchrun ran with its default TCPStore sharing (`--torch-share-store`).",
        "Both launchers use the same `elasticctl store`, so the store is not what differs. "
        "Loopback only: no network latency.",
    ]
    for n in notes:
        L.append(f"- {n}")
    L.append("")
    return "\n".join(L)


def machine_info() -> dict:
    cpu = cpu_model()
    return {"nproc": os.cpu_count(), "cpu": cpu}


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elasticrun", default=os.environ.get("ELASTICRUN",
                                                           str(ROOT / "build/release/elasticrun")))
    ap.add_argument("--elasticctl", default=os.environ.get("ELASTICCTL",
                                                           str(ROOT / "build/release/elasticctl")))
    ap.add_argument("--torchrun", default=str(ROOT / ".venv/bin/torchrun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--heartbeat", type=float, default=0.05, help="elasticrun heartbeat_interval, s")
    ap.add_argument("--torch-monitor", type=float, default=0.1)
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds between the first two workers running and the third agent")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per wait")
    ap.add_argument("--torch-share-store", action="store_true",
                    help="leave torchrun's shared TCPStore on (a join then stalls; see the report)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1 run each, no report")
    ap.add_argument("--output", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.runs = 1
    if args.output is None:
        args.output = Path("-") if args.quick else ROOT / "docs/benchmarks.md"
    for path in (args.elasticrun, args.elasticctl):
        if not os.access(path, os.X_OK):
            ap.error(f"{path} is not an executable; build it first (or set $ELASTICRUN)")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = ".venv/bin/python bench/scaleup_bench.py" + "".join(
        " " + shlex.quote(a) for a in argv)
    info = machine_info()
    info["source"] = source_state()
    info["load_start"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    started = datetime.datetime.now(datetime.timezone.utc)
    res = {"elasticrun": {"total": [], "import": [], "old_stopped": [], "new_spread": []},
           "torchrun": {"total": [], "import": [], "old_stopped": [], "new_spread": []}}
    tools = ["elasticrun"] + ([] if args.skip_torch else ["torchrun"])
    with tempfile.TemporaryDirectory(prefix="scaleup-") as d:
        for i in range(args.runs):
            # Alternate which launcher goes first, so drift hits both.
            for tool in (tools if i % 2 == 0 else list(reversed(tools))):
                try:
                    r = one_run(tool, args, Path(d), i)
                except BenchError as e:
                    if tool != "torchrun":
                        raise
                    print(f"torchrun run {i + 1}: {e}", file=sys.stderr)
                    res["torch_error"] = str(e).splitlines()[0]
                    continue
                for k, v in r.items():
                    res[tool][k].append(v)
                print(f"run {i + 1}/{args.runs} {tool:10s} total {r['total'] * 1e3:8.1f} ms  "
                      f"launcher up at {r['import'] * 1e3:7.1f} ms  "
                      f"old workers stopped at {r['old_stopped'] * 1e3:8.1f} ms  new workers "
                      f"within {r['new_spread'] * 1e3:.1f} ms", flush=True)
    info["load_end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        import torch  # noqa: PLC0415 (only for the version line)
        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = "?"
    o, t = res["elasticrun"]["total"], res["torchrun"]["total"]
    print(f"\nelasticrun median {statistics.median(o) * 1e3:.1f} ms"
          + (f"; torchrun median {statistics.median(t) * 1e3:.0f} ms; ratio "
             f"{statistics.median(t) / statistics.median(o):.0f}x" if t else ""))
    if str(args.output) != "-":
        write_section(args.output, "scaleup", render(args, res, info, command, started))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"scaleup_bench: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
