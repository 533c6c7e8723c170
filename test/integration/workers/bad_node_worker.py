"""A worker for test_bad_nodes.py: plain Python on the SDK, no torch.

Steps --steps times, --step-s apart, timing a stand-in for its compute
with elasticrun.compute() and publishing each step. Records "start" and
"finish" (gen, rank, world, agent pid) in <events>/events.jsonl.

Its agent (the parent process) may be named in <events>/bad: then, while
<events>/crashes holds fewer than --crashes lines, it exits 1 at step 3
(appending a line first); or in <events>/slow: then its compute takes
--slow times as long.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import elasticrun

p = argparse.ArgumentParser()
p.add_argument("events")
p.add_argument("--steps", type=int, default=40)
p.add_argument("--step-s", type=float, default=0.05)
p.add_argument("--crashes", type=int, default=0)
p.add_argument("--slow", type=float, default=1.0)
args = p.parse_args()
events = Path(args.events)
agent = os.getppid()


def listed(name: str) -> bool:
    path = events / name
    return path.exists() and str(agent) in path.read_text().split()


def record(ev: str) -> None:
    line = json.dumps({"event": ev, "gen": int(os.environ.get("ELASTICRUN_GENERATION", "0")),
                       "rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
                       "agent": agent, "t": time.time()})
    with open(events / "events.jsonl", "a") as f:
        f.write(line + "\n")


elasticrun.attach()
record("start")
slow = args.slow if listed("slow") else 1.0
for step in range(args.steps):
    with elasticrun.compute():
        time.sleep(args.step_s * 0.5 * slow)
    time.sleep(args.step_s * 0.5)
    elasticrun.step(step)
    if step == 3 and listed("bad"):
        crashes = events / "crashes"
        done = len(crashes.read_text().splitlines()) if crashes.exists() else 0
        if done < args.crashes:
            with open(crashes, "a") as f:
                f.write(f"{agent}\n")
            record("crash")
            sys.exit(1)
    if elasticrun.elastic_event_detected():
        record("stop")
        elasticrun.saved()
        sys.exit(0)
record("finish")
