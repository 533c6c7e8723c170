"""The elastic training demo: one job, four membership changes, one machine.

Three elasticrun agents stand for three nodes (127.0.0.1-3, one worker
each); the first hosts the rendezvous store. The job trains
examples/python/train_elastic.py and lives through:

  1. a start at 2 nodes,
  2. a third node joining (the job grows to 3 at the next agreed step),
  3. `elasticctl release --nodes 1` (partial preemption: back to 2; the
     released node waits as a spare),
  4. a worker killed with SIGKILL (the job restarts from its last checkpoint),

and finishes. One line per event as it happens; at the end a check that the
global batch stayed constant and that every sample of each epoch was used
exactly once by the steps that survive into the final model, and a plot of
world size and loss over steps (PNG).

    python elastic_demo.py --elasticrun build/release/elasticrun \\
        --elasticctl build/release/elasticctl --out build/demo
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TRAIN = HERE / "train_elastic.py"


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Demo:
    def __init__(self, args):
        self.args = args
        self.out = args.out.resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        for old in [*self.out.glob("log/*.jsonl"), *self.out.glob("agent*.events.jsonl")]:
            old.unlink()
        self.ckpt = self.out / "ckpt"
        if self.ckpt.exists():
            subprocess.run(["rm", "-rf", str(self.ckpt)], check=True)
        self.port = free_port()
        self.agents: dict[int, subprocess.Popen] = {}
        self.marks: list[tuple[int, str]] = []  # (step, event) for the plot
        # Workers run the python3 that PATH finds first: this interpreter's.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
                        PYTHONPATH=str(REPO / "python"), PATH=path)

    def start_agent(self, n: int) -> None:
        log = open(self.out / f"agent{n}.log", "wb")
        cmd = [str(self.args.elasticrun), "--nnodes", "2:3", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.port}",
               "--rdzv-id", "demo", "--local-addr", f"127.0.0.{n}", "--max-restarts", "3",
               "--warm-start",  # restarts in interpreters that imported torch already
               "--scaling-timeout", "2", "--min-stable-period", "0",
               "--rdzv-conf", "heartbeat_interval=0.5,last_call_timeout=1",
               # Every decision and event of the agent (docs/events.md).
               "--event-log", str(self.out / f"agent{n}.events.jsonl"),
               str(TRAIN), "--ckpt", str(self.ckpt), "--steps", str(self.args.steps),
               "--log", str(self.out / "log"), "--step-s", "0.1"]
        self.agents[n] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          env=self.env, start_new_session=True)

    def records(self) -> list[dict]:
        out = []
        for path in (self.out / "log").glob("steps.rank*.jsonl"):
            rank = int(path.name.split(".")[1][4:])
            for line in path.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    rec["rank"] = rank
                    out.append(rec)
        return out

    def progress(self) -> tuple[int, int, int]:
        """(last step, its world size, its generation) from rank 0's log."""
        path = self.out / "log" / "steps.rank0.jsonl"
        if not path.exists():
            return 0, 0, 0
        lines = path.read_text().splitlines()
        if not lines:
            return 0, 0, 0
        last = json.loads(lines[-1])
        return last["step"], last["world"], last["gen"]

    def wait(self, what: str, pred, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            for n, p in self.agents.items():
                if p.poll() not in (None, 0):
                    raise SystemExit(f"agent {n} exited {p.returncode} while waiting for {what}; "
                                     f"see {self.out}/agent{n}.log")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}; logs in {self.out}")
            time.sleep(0.2)

    def run(self) -> int:
        a = self.args
        say(f"job of 2:3 nodes, global batch 48, {a.steps} steps; logs in {self.out}")
        self.start_agent(1)
        self.start_agent(2)
        self.wait("2 nodes training", lambda: self.progress()[0] >= 20 and self.progress()[1] == 2)
        say(f"step {self.progress()[0]}: training on 2 nodes")

        self.start_agent(3)
        self.marks.append((self.progress()[0], "node joins"))
        say("a third node joins")
        self.wait("3 nodes training", lambda: self.progress()[1] == 3)
        step, _, gen = self.progress()
        say(f"step {step}: the job grew to 3 nodes (generation {gen})")
        self.wait("progress at 3", lambda: self.progress()[0] >= step + 20)
        # What `elasticctl watch` shows live (one frame of it here).
        watch = [str(a.elasticctl), "watch", "--rdzv-endpoint", f"127.0.0.1:{self.port}",
                 "--rdzv-id", "demo"]
        say("elasticctl watch (live in a terminal; one frame here): " + " ".join(watch[1:]))
        frame = subprocess.run(watch + ["--once"], env=self.env, capture_output=True, text=True)
        for line in frame.stdout.rstrip().splitlines():
            print("    " + line.rstrip(), flush=True)

        self.marks.append((self.progress()[0], "release 1"))
        say("elasticctl release --nodes 1 (a higher-priority job takes a node)")
        subprocess.run([str(a.elasticctl), "release", "--rdzv-endpoint", f"127.0.0.1:{self.port}",
                        "--rdzv-id", "demo", "--nodes", "1"], check=True, env=self.env)
        self.wait("back to 2 nodes", lambda: self.progress()[1] == 2)
        step, _, gen = self.progress()
        say(f"step {step}: training continues on 2 nodes (generation {gen}); "
            f"the released node waits as a spare")
        self.wait("progress at 2", lambda: self.progress()[0] >= step + 20)

        victim = self.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        before = self.progress()
        self.marks.append((before[0], "worker killed"))
        say(f"step {before[0]}: worker pid {victim} killed with SIGKILL")
        self.wait("recovery", lambda: self.progress()[2] > before[2])
        step, world, gen = self.progress()
        say(f"step {step}: recovered from the last checkpoint on {world} nodes (generation {gen})")

        for n, p in self.agents.items():
            code = p.wait(timeout=600)
            if code != 0:
                say(f"agent {n} exited {code}; see {self.out}/agent{n}.log")
                return 1
        say("training finished; every agent exited 0")
        return self.check_and_plot()

    def worker_pids(self) -> list[int]:
        """Workers: the agents' children that run the training script (the
        agents' own command lines name it too)."""
        agents = {p.pid for p in self.agents.values()}
        out = subprocess.run(["pgrep", "-f", str(TRAIN)], capture_output=True, text=True)
        pids = []
        for pid in (int(x) for x in out.stdout.split()):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except FileNotFoundError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            # The agent's death watch is its child too, with the agent's argv.
            if ppid in agents and b"python" in Path(argv0.decode()).name.encode():
                pids.append(pid)
        return pids

    def check_and_plot(self) -> int:
        recs = self.records()
        # The steps that survive into the final model: for each step, the
        # records of the last generation that ran it (a failure rolls back
        # to the checkpoint, and the steps after it are done again).
        by_step: dict[int, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
        for r in recs:
            by_step[r["step"]][r["gen"]].append(r)
        final = {s: gens[max(gens)] for s, gens in by_step.items()}
        ok = True
        if sorted(final) != list(range(1, self.args.steps + 1)):
            say(f"FAIL: surviving steps are not 1..{self.args.steps}")
            ok = False
        bad_batch = [s for s, rs in final.items()
                     if sum(len(r["indices"]) for r in rs) != 48 or len(rs) != rs[0]["world"]]
        if bad_batch:
            say(f"FAIL: the global batch was not 48 at steps {bad_batch[:10]}")
            ok = False
        else:
            say("global batch: 48 at every one of the surviving steps, at every world size")
        seen: dict[int, list[int]] = defaultdict(list)
        for s in sorted(final):
            for r in final[s]:
                seen[r["epoch"]].extend(r["indices"])
        for epoch, idx in sorted(seen.items()):
            dup = len(idx) - len(set(idx))
            complete = len(set(idx)) == 48 * 32
            if dup:
                say(f"FAIL: epoch {epoch}: {dup} samples used twice")
                ok = False
            else:
                say(f"epoch {epoch}: {len(idx)} samples, each used once"
                    + (" (complete)" if complete else " (the run ended inside it)"))
        wasted = sum(len(gens) - 1 for gens in by_step.values())
        say(f"steps done again after the failure: {wasted}")
        self.plot(final)
        self.summarize_events()
        self.timeline()
        return 0 if ok else 1

    def summarize_events(self) -> None:
        """What the agents' event logs recorded: the job's history."""
        decisions = []
        for path in sorted(self.out.glob("agent*.events.jsonl")):
            for line in path.read_text().splitlines():
                e = json.loads(line)
                if e["event"] in ("policy_decision", "restart_decision", "health_fault"):
                    decisions.append((e["time"], e["event"], e.get("reason", "")))
        for t, kind, reason in sorted(decisions):
            say(f"event log: {t} {kind}: {reason}")
        say(f"event logs: {self.out}/agent*.events.jsonl (docs/events.md)")

    def timeline(self) -> None:
        """The run drawn from all agents' event logs (elasticctl timeline)."""
        logs = sorted(str(p) for p in self.out.glob("agent*.events.jsonl"))
        for out in ("timeline.png", "timeline.html"):
            subprocess.run([str(self.args.elasticctl), "timeline", *logs, "-o", str(self.out / out),
                            "--title", "elasticrun demo: 2 -> 3 nodes, release 1, a worker killed"],
                           check=True, stdout=subprocess.DEVNULL)
            say(f"timeline: {self.out / out}")

    def plot(self, final) -> None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            say("matplotlib is missing: no plot")
            return
        steps = sorted(final)
        world = [final[s][0]["world"] for s in steps]
        loss = [final[s][0]["loss"] for s in steps]
        fig, ax1 = plt.subplots(figsize=(8, 4))
        ax1.step(steps, world, where="post", color="tab:blue")
        ax1.set_xlabel("step")
        ax1.set_ylabel("world size (ranks)", color="tab:blue")
        ax1.set_ylim(0, max(world) + 1)
        ax2 = ax1.twinx()
        ax2.plot(steps, loss, color="tab:red", linewidth=1)
        ax2.set_ylabel("loss", color="tab:red")
        ax2.set_yscale("log")
        for at, what in self.marks:
            ax1.axvline(at, color="gray", linestyle=":", linewidth=1)
            ax1.text(at, max(world) + 0.6, " " + what, fontsize=8, color="gray")
        ax1.set_title("elasticrun demo: 2 -> 3 nodes, release 1, a worker killed")
        fig.tight_layout()
        png = self.out / "elastic_demo.png"
        fig.savefig(png, dpi=100)
        say(f"plot: {png}")

    def cleanup(self) -> None:
        for p in self.agents.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elasticrun", type=Path, required=True)
    ap.add_argument("--elasticctl", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("build/demo"))
    ap.add_argument("--steps", type=int, default=240)
    demo = Demo(ap.parse_args())
    try:
        return demo.run()
    finally:
        demo.cleanup()


if __name__ == "__main__":
    sys.exit(main())
