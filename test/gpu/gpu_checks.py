"""The checks of test/gpu/run.sh on a machine with NVIDIA GPUs (its header
says how to run them). Standard library only; the workers import torch.

  gpu-health   elasticrun on the real NVML: the agent logs that it watches
               every GPU nvidia-smi lists, and a job on healthy GPUs ends
               without a fault.
  nccl-stop    NCCL survivors are released: ranks all-reduce CUDA tensors
  nccl-absent  through the SDK (nccl_worker.py); in the first run one rank
               is SIGSTOPped, or never enters the all_reduce; the agent's
               hang monitor finds it, the SDK aborts the survivors' NCCL
               process group, their step raises within a bound (NCCL's
               own timeout is 10 minutes), the job restarts and finishes.
               Four GPUs or more: two agents (a dynamic job on 127.0.0.1
               and 127.0.0.2), two ranks each; two or three: one agent,
               one rank per GPU (NCCL refuses two ranks on one GPU); one:
               skipped.
  nccl-inprocess  --inprocess-restart on NCCL: examples/python/
               train_inprocess.py under two agents (a dynamic job 1:2 on
               127.0.0.1 and 127.0.0.2, one GPU each); the second joins and
               then leaves on SIGTERM: the first agent's worker is one
               process throughout (its NCCL group torn down and made again
               in process), the joiner's parameters equal the survivor's bit
               for bit at every step (the state came by NCCL broadcast), and
               the job finishes. Two GPUs or more.

--backend gloo rehearses the NCCL checks on CPU tensors (with a fake
nvidia-smi on PATH and --gpus N, on a machine without GPUs): it tests the
harness, not NCCL.

Every process started carries a marker in its environment; after each
check nothing may carry it, and at the end whatever does is killed.
Prints one line per check and a PASS/FAIL summary; exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "nccl_worker.py"
TRAIN_INPROCESS = REPO / "examples/python/train_inprocess.py"
MARKER_VAR = "ELASTICRUN_GPU_CHECK_MARKER"
MARKER = uuid.uuid4().hex
HANG_S = 3
# From the misbehaviour to a survivor's release: the hang limit, the fault's
# stack capture, the end record's round trip (two agents), the SDK's poll,
# NCCL's abort. Far below NCCL's 10 minutes.
RELEASE_BOUND_S = HANG_S + 30
CASE_TIMEOUT_S = 180
GONE_TIMEOUT_S = 15
RDZV_CONF = "heartbeat_interval=0.2,missed_heartbeats=5,last_call_timeout=0.5,join_timeout=60"
FAST = ["--scaling-timeout", "1", "--min-stable-period", "0", "--graceful-shutdown-timeout", "10"]

procs: list[subprocess.Popen] = []


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


class TimeLimit(BaseException):
    pass


def log(msg: str) -> None:
    print(f"[gpu-checks] {msg}", flush=True)


def marked_pids() -> list[int]:
    needle = f"{MARKER_VAR}={MARKER}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            pass
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def kill_everything() -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in marked_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass


def nothing_left() -> None:
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while marked_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [f"pid {p}: {cmdline(p)}" for p in marked_pids()]
    if left:
        raise Failed("processes left running:\n    " + "\n    ".join(left))


def environment(python: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC_")) and k not in ("RANK", "LOCAL_RANK")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = str(REPO / "python")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["NCCL_SOCKET_IFNAME"] = "lo"  # every rank is on this machine
    env[MARKER_VAR] = MARKER
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for k, v in extra.items():
        env[k] = v
    return env


def spawn(args: list, env: dict, out: Path) -> subprocess.Popen:
    p = subprocess.Popen([str(a) for a in args], env=env, stdout=open(out.with_suffix(".out"), "w"),
                         stderr=open(out.with_suffix(".err"), "w"), start_new_session=True,
                         cwd=out.parent)
    procs.append(p)
    return p


def wait(p: subprocess.Popen, timeout: float, what: str, err: Path) -> int:
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"{what} still running after {timeout:.0f} s\n{tail(err)}") from None


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "    " + "\n    ".join(text[-lines:])


def nvidia_smi_gpus() -> list[str]:
    """PCI addresses as the driver's /proc names them ("0000:1b:00.0")."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    gpus = []
    for line in out.split():
        domain, rest = line.strip().split(":", 1)
        gpus.append(f"{int(domain, 16):04x}:{rest.lower()}")
    return gpus


def check_gpu_health(elasticrun: Path, python: Path, work: Path) -> str:
    gpus = nvidia_smi_gpus()
    out = work / "gpu-health"
    out.mkdir()
    # Two GPU readings (every 5 s) while the job runs.
    p = spawn([elasticrun, "--standalone", "--nproc-per-node", "1", "--no-python", "/bin/sleep",
               "12"], environment(python), out / "agent")
    code = wait(p, 60, "the agent", out / "agent.err")
    err = (out / "agent.err").read_text(errors="replace")
    watching = [l for l in err.splitlines() if "GPU health: watching" in l]
    if code != 0:
        raise Failed(f"the job exited {code}\n{tail(out / 'agent.err')}")
    if "GPU health is skipped" in err or not watching:
        raise Failed(f"GPU health does not watch the GPUs\n{tail(out / 'agent.err')}")
    missing = [g for g in gpus if f"GPU {g} (CUDA " not in watching[0]]
    if missing:
        raise Failed(f"not watched: {', '.join(missing)}; the agent said:\n    {watching[0]}")
    if "GpuError" in err:
        raise Failed(f"a GPU fault on healthy GPUs\n{tail(out / 'agent.err')}")
    nothing_left()
    # Notes (pending remaps, an application's XID) are the driver's news, not faults.
    notes = [l.split("GPU health: ", 1)[1] for l in err.splitlines() if "GPU health: GPU" in l]
    return watching[0].split("GPU health: ", 1)[1] + "".join(f"; note: {n}" for n in notes)


def start_store(elasticctl: Path, python: Path, out: Path) -> int:
    p = spawn([elasticctl, "store", "--host", "127.0.0.1", "--port", "0"], environment(python),
              out / "store")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(r"listening on \S+:(\d+)", (out / "store.err").read_text(errors="replace"))
        if m:
            return int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise Failed(f"the store did not start\n{tail(out / 'store.err')}")


def check_nccl(mode: str, elasticrun: Path, elasticctl: Path, python: Path, gpus: int,
               work: Path, backend: str) -> str:
    if gpus < 2:
        raise Skipped("one GPU: NCCL cannot put two ranks of one communicator on it")
    out = work / f"nccl-{mode}"
    out.mkdir()
    events = out / "events"
    worker = [WORKER, events, "--mode", mode, "--at", "20", "--steps", "60", "--backend", backend]
    health = ["--hang-timeout", str(HANG_S), "--max-restarts", "1"]
    agents = []
    if gpus >= 4:
        layout = "two agents of two ranks each"
        port = start_store(elasticctl, python, out)
        for n, visible in ((1, "0,1"), (2, "2,3")):
            agents.append(spawn(
                [elasticrun, "--nnodes", "2:2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"gpu-{mode}",
                 "--local-addr", f"127.0.0.{n}", "--rdzv-conf", RDZV_CONF, *FAST, *health,
                 *worker],
                environment(python, CUDA_VISIBLE_DEVICES=visible), out / f"agent{n}"))
    else:
        layout = f"one agent of {gpus} ranks"
        agents.append(spawn([elasticrun, "--standalone", "--nproc-per-node", str(gpus), *health,
                             *worker], environment(python), out / "agent1"))
    deadline = time.monotonic() + CASE_TIMEOUT_S
    for n, p in enumerate(agents, 1):
        err = out / f"agent{n}.err"
        code = wait(p, max(1.0, deadline - time.monotonic()), f"agent {n}", err)
        if code != 0:
            raise Failed(f"agent {n} exited {code}\n{tail(err)}")
    for p in procs:
        if p.poll() is None and p not in agents:  # the store
            p.send_signal(signal.SIGTERM)
            p.wait(30)
    nothing_left()

    recs = [json.loads(line) for line in (events / "events.jsonl").read_text().splitlines()]
    bad = [r for r in recs if r["event"] == "misbehave"]
    if len(bad) != 1:
        raise Failed(f"expected one misbehaving rank, found {bad}")
    world = next(r["world"] for r in recs if r["event"] == "start")
    survivors = set(range(world)) - {bad[0]["rank"]}
    released = {r["rank"]: r for r in recs if r["event"] == "released" and r["first_run"]}
    if set(released) != survivors:
        raise Failed(f"survivors {sorted(survivors)}, released {sorted(released)}: {recs}")
    slowest = max(r["t"] - bad[0]["t"] for r in released.values())
    if not HANG_S <= slowest < RELEASE_BOUND_S:
        raise Failed(f"released {slowest:.1f} s after the misbehaviour, bound {RELEASE_BOUND_S} s")
    finished = {r["rank"] for r in recs if r["event"] == "finish" and not r["first_run"]}
    if finished != set(range(world)):
        raise Failed(f"the restarted run finished on ranks {sorted(finished)} of {world}")
    error = next(iter(released.values()))["error"]
    return f"{layout}: survivors released {slowest:.1f} s after it ({error[:80]!r})"


def steps_logged(log: Path) -> list[dict]:
    out = []
    for path in sorted(log.glob("steps.rank*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short
    return out


def wait_world(log: Path, world: int, after_gen: int, agent: subprocess.Popen, err: Path) -> int:
    """The generation of the first step at `world` ranks after `after_gen`."""
    deadline = time.monotonic() + CASE_TIMEOUT_S
    while time.monotonic() < deadline:
        gens = [e["gen"] for e in steps_logged(log) if e["world"] == world and e["gen"] > after_gen]
        if gens:
            return min(gens)
        if agent.poll() is not None:
            raise Failed(f"agent 1 exited {agent.returncode} before a step at {world}\n{tail(err)}")
        time.sleep(0.1)
    raise Failed(f"no step at world size {world} after generation {after_gen}\n{tail(err)}")


def check_nccl_inprocess(elasticrun: Path, elasticctl: Path, python: Path, gpus: int,
                         work: Path) -> str:
    if gpus < 2:
        raise Skipped("one GPU: NCCL cannot put two ranks of one communicator on it")
    out = work / "nccl-inprocess"
    out.mkdir()
    log = out / "log"
    port = start_store(elasticctl, python, out)

    def agent(n: int) -> subprocess.Popen:
        return spawn([elasticrun, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend",
                      "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gpu-inprocess",
                      "--local-addr", f"127.0.0.{n}", "--rdzv-conf", RDZV_CONF, *FAST,
                      "--inprocess-restart", TRAIN_INPROCESS, "--steps", "400", "--step-s", "0.05",
                      "--log", log],
                     environment(python, CUDA_VISIBLE_DEVICES=str(n - 1)), out / f"agent{n}")

    a1 = agent(1)
    err = out / "agent1.err"
    g1 = wait_world(log, 1, -1, a1, err)
    a2 = agent(2)
    g2 = wait_world(log, 2, g1, a1, err)
    time.sleep(2)  # some steps at 2
    a2.send_signal(signal.SIGTERM)
    wait(a2, 60, "agent 2 after SIGTERM", out / "agent2.err")
    wait_world(log, 1, g2, a1, err)
    code = wait(a1, CASE_TIMEOUT_S, "agent 1", err)
    if code != 0:
        raise Failed(f"agent 1 exited {code}\n{tail(err)}")
    for p in procs:
        if p.poll() is None:  # the store
            p.send_signal(signal.SIGTERM)
            p.wait(30)
    nothing_left()

    recs = steps_logged(log)
    # At world size 1 only agent 1's worker trains: before the join and after the leave.
    survivor = {e["pid"] for e in recs if e["world"] == 1}
    if len(survivor) != 1:
        raise Failed(f"agent 1's rank was {len(survivor)} processes: {sorted(survivor)}")
    by_step: dict[int, set[str]] = {}
    for e in recs:
        if e["world"] == 2:
            by_step.setdefault(e["step"], set()).add(e["params"])
    unequal = [s for s, p in by_step.items() if len(p) != 1]
    if not by_step or unequal:
        raise Failed(f"steps at world size 2: {len(by_step)}; unequal parameters at {unequal[:5]}")
    last = max(e["step"] for e in recs)
    if last != 400:
        raise Failed(f"the job ended at step {last}, not 400")
    return (f"one survivor process through 1 -> 2 -> 1; {len(by_step)} steps at 2 with equal "
            f"parameters on both ranks")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elasticrun", type=Path, required=True)
    ap.add_argument("--elasticctl", type=Path, required=True)
    ap.add_argument("--python", type=Path, required=True)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    args = ap.parse_args()
    # run.sh's time limit: end the check under way, then report.
    def time_limit(*_):
        raise TimeLimit()

    signal.signal(signal.SIGTERM, time_limit)

    work = Path(tempfile.mkdtemp(prefix="elasticrun-gpu-checks-"))
    log(f"{args.gpus} GPU(s); work directory {work}")
    torch_ok = subprocess.run(
        [args.python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() and "
         "torch.distributed.is_nccl_available() else 1)"], capture_output=True).returncode == 0
    checks = [("gpu-health", lambda: check_gpu_health(args.elasticrun, args.python, work))]
    for mode in ("stop", "absent"):
        def nccl(mode=mode):
            if not torch_ok and args.backend == "nccl":
                raise Skipped(f"{args.python} has no torch with CUDA and NCCL")
            return check_nccl(mode, args.elasticrun, args.elasticctl, args.python, args.gpus, work,
                              args.backend)
        checks.append((f"{args.backend}-{mode}", nccl))

    def nccl_inprocess():
        if not torch_ok and args.backend == "nccl":
            raise Skipped(f"{args.python} has no torch with CUDA and NCCL")
        return check_nccl_inprocess(args.elasticrun, args.elasticctl, args.python, args.gpus, work)
    checks.append((f"{args.backend}-inprocess", nccl_inprocess))

    results = []
    try:
        for name, fn in checks:
            log(f"{name} ...")
            start = time.monotonic()
            try:
                detail = fn()
                results.append((name, "PASS", detail))
            except Skipped as e:
                results.append((name, "SKIP", str(e)))
            except Failed as e:
                results.append((name, "FAIL", str(e)))
            except Exception as e:  # noqa: BLE001: a broken check is a failure, not a crash
                results.append((name, "FAIL", f"{type(e).__name__}: {e}"))
            finally:
                kill_everything()
            log(f"{name}: {results[-1][1]} ({time.monotonic() - start:.0f} s)")
    except TimeLimit:
        results.append((name, "FAIL", "stopped by run.sh's time limit"))
        results += [(n, "FAIL", "not run: the time limit") for n, _ in checks[len(results):]]
    finally:
        kill_everything()
    print("\n==== test/gpu summary ====")
    for name, verdict, detail in results:
        print(f"{verdict:4}  {name}: {detail}")
    failed = [r for r in results if r[1] == "FAIL"]
    print(f"==== {'FAIL' if failed else 'PASS'}: {len(results) - len(failed)} of {len(results)} "
          f"checks passed or skipped; logs in {work} ====")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
