"""The churn benchmark's harness (bench/churn/churn_bench.py) on a short
trace, with real agents, workers, elasticctl and torchrun: every second of
each run is accounted once, each event has a recovery whose phases add up,
and nothing is left running. Correctness of the accounting, not speed: no
figure here is held to a target (the long traces are the benchmark).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, elasticctl  # noqa: F401 (fixture)
from launcher_fixtures import elasticrun, torchrun  # noqa: F401 (fixture)

# A join, then a crashed worker once torchrun has long restarted for the
# join (a cold restart takes 15-25 s here), in about a minute of training.
TRACE = """\
nnodes 2:3
nodes 2
samples 26400
5   join
45  kill-worker
"""
STEPS = 26400 // 48


def test_a_short_trace_under_both_launchers_is_accounted_in_full(
        tmp_path, elasticrun, elasticctl, torchrun):  # noqa: F811
    trace = tmp_path / "test.trace"
    trace.write_text(TRACE)
    out = tmp_path / "churn.json"
    runs = tmp_path / "runs"
    r = subprocess.run(
        [sys.executable, str(REPO / "bench/churn/churn_bench.py"), "--trace", str(trace),
         "--elasticrun", str(elasticrun), "--elasticctl", str(elasticctl),
         "--torchrun", str(torchrun), "--warm-start", "--no-fixed", "--no-report",
         "--out", str(runs), "--json", str(out), "--stall-s", "120", "--timeout", "600"],
        capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(out.read_text())

    for name in ("elasticrun", "torchrun"):
        res = got["results"][name]
        # No note: every step survived once, nothing hung or was left behind,
        # every agent still up at the end exited 0.
        assert res["notes"] == [], (name, res["notes"])
        assert res["steps"] == res["steps_expected"] == STEPS, name
        assert [e["action"] for e in res["played"]] == ["join", "kill-worker"], name
        # Every instant of the wall time in exactly one category.
        assert sum(res["breakdown"].values()) == pytest.approx(res["wall_s"], rel=1e-9), name
        assert res["kept_s"] == pytest.approx(res["breakdown"]["training, kept"]), name
        assert res["goodput"] == pytest.approx(res["kept_s"] / res["wall_s"]), name
        assert 0 < res["goodput_from_first_step"] <= 1 and res["goodput"] < 1, name
        # One recovery per event, its phases adding up to its total.
        assert len(res["recoveries"]) == 2, (name, res["recoveries"])
        for rec in res["recoveries"]:
            assert rec["total"] is not None, (name, rec)
            assert sum(rec["phases"].values()) == pytest.approx(rec["total"], abs=0.02), (name, rec)
        assert [(x["world_before"], x["world_after"]) for x in res["recoveries"]] == \
            [(2, 3), (3, 3)], name
    # elasticrun stops at an agreed step for the join, and a survivor
    # rescues the crashed worker's step: no step is trained twice.
    assert got["results"]["elasticrun"]["steps_lost"] == 0
    assert got["results"]["elasticrun"]["breakdown"]["training, lost to rollback"] == 0
    left = subprocess.run(["pgrep", "-f", str(runs)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the runs left behind: {left}"

