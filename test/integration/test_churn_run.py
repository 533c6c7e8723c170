"""The churn benchmark's harness (bench/churn/churn_bench.py) on a short
trace, with real agents, workers and elasticctl: every second of the run is
accounted once, each event has a recovery whose phases add up, and nothing
is left running. Correctness of the accounting, not speed: no figure here is
held to a target (the long traces are the benchmark). Only elasticrun: the
same harness under torchrun costs a cold restart per event, minutes of the
suite's CPU, and the accounting is the same code (test_churn_accounting.py
checks it on torchrun-shaped logs by hand). Every health monitor is on
(bench/churn/monitors.yaml), and none may fire.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, elasticctl  # noqa: F401 (fixture)
from launcher_fixtures import elasticrun  # noqa: F401 (fixture)

# A join, then a crashed worker, in about 40 s of training at 2-3 nodes.
TRACE = """\
nnodes 2:3
nodes 2
samples 14400
5   join
30  kill-worker
"""
STEPS = 14400 // 48


def test_a_short_trace_is_accounted_in_full(tmp_path, elasticrun, elasticctl):  # noqa: F811
    trace = tmp_path / "test.trace"
    trace.write_text(TRACE)
    out = tmp_path / "churn.json"
    runs = tmp_path / "runs"
    r = subprocess.run(
        [sys.executable, str(REPO / "bench/churn/churn_bench.py"), "--trace", str(trace),
         "--launchers", "elasticrun", "--elasticrun", str(elasticrun),
         "--elasticctl", str(elasticctl), "--warm-start", "--no-fixed", "--no-report",
         # Every health monitor on: none may fire on healthy training.
         "--elasticrun-args", f"--config {REPO / 'bench/churn/monitors.yaml'}",
         "--out", str(runs), "--json", str(out), "--stall-s", "120", "--timeout", "600"],
        capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())["results"]["elasticrun"]
    # No note: every step survived once, nothing hung or was left behind,
    # every agent still up at the end exited 0.
    assert res["notes"] == [], res["notes"]
    assert res["steps"] == res["steps_expected"] == STEPS
    assert [e["action"] for e in res["played"]] == ["join", "kill-worker"]
    # Every instant of the wall time in exactly one category.
    assert sum(res["breakdown"].values()) == pytest.approx(res["wall_s"], rel=1e-9)
    assert res["kept_s"] == pytest.approx(res["breakdown"]["training, kept"])
    assert res["goodput"] == pytest.approx(res["kept_s"] / res["wall_s"])
    assert 0 < res["goodput"] < res["goodput_from_first_step"] <= 1
    # One recovery per event, its phases adding up to its total. On a
    # loaded machine the joining node's interpreter may still be importing
    # torch when the worker is killed: then both events share the join's
    # recovery, and the kill has none of its own.
    recoveries = res["recoveries"]
    assert len(recoveries) == 2 and recoveries[0]["total"] is not None, recoveries
    for rec in recoveries:
        if rec["total"] is not None:
            assert sum(rec["phases"].values()) == pytest.approx(rec["total"], abs=0.02), rec
    worlds = [(x["world_before"], x["world_after"]) for x in recoveries if x["total"] is not None]
    assert worlds in ([(2, 3), (3, 3)], [(2, 3)]), worlds
    # No false alarm: the killed worker is a failure, not a health fault.
    faults = [line for log in runs.rglob("agent*.log")
              for line in log.read_text(errors="replace").splitlines() if "] health: " in line]
    assert not faults, faults
    left = subprocess.run(["pgrep", "-f", str(runs)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the runs left behind: {left}"
