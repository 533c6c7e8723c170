"""The health monitors of docs/health.md against real agents and workers:
faults that exit nothing (a hang, a stopped process, a NaN loss, no first
step) are found, explained (fault.json, the workers' Python stacks, the
failure report) and handled as failures (a restart, or the job fails), and
nothing is left running.

Workers are workers/health_worker.py: the SDK without torch, except where a
collective must block (--torch, gloo). Limits are seconds, not minutes;
timeouts only bound hangs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, WORKERS
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    parse_failure_report,
)

WORKER = WORKERS / "health_worker.py"
SDK = REPO / "python"


def run(procs, marker, elasticrun, tmp_path: Path, flags: list, worker_args: list,
        name: str = "agent"):
    """Runs a standalone job of two workers to its end; returns (proc, log dir, state dir)."""
    logs, state = tmp_path / "logs", tmp_path / "state"
    state.mkdir()
    proc = procs.spawn(
        [elasticrun, "--standalone", "--nproc-per-node", "2", "--log-dir", logs, *flags,
         WORKER, "--dir", state, *worker_args],
        name,
        env=launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(SDK)),
        cwd=tmp_path,
    )
    proc.wait(RUN_TIMEOUT_S)
    return proc, logs, state


def fault_record(logs: Path, attempt: int = 0) -> dict:
    [path] = logs.glob(f"*/attempt_{attempt}/fault.json")
    return json.loads(path.read_text())


def test_a_worker_that_stops_stepping_is_a_hang_with_its_stacks_recorded(
    procs, marker, elasticrun, tmp_path
):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, ["--hang-timeout", "2"],
                        ["--mode", "hang", "--bad-rank", "1", "--at", "5", "--steps", "100000"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "hang" and fault["reason"] == "Hang"
    assert fault["local_rank"] == 1 and fault["rank"] == 1
    assert fault["last_step"] == 4
    assert "made no progress for 2." in fault["message"]
    stacks = {s["local_rank"]: s for s in fault["stacks"]}
    assert stacks[1]["how"] == "faulthandler" and not stacks[1]["stopped"]
    # The hung rank's stack shows where it hangs: the sleep in the loop.
    text = Path(stacks[1]["file"]).read_text()
    assert "health_worker.py" in text and "elasticrun: Python stacks of local rank 1" in text
    assert "in <module>" in text
    report = parse_failure_report(proc.stderr())
    assert report.root.rank == (1, 1)
    assert "health fault Hang: local rank 1 made no progress" in proc.stderr()


def test_a_stopped_worker_is_a_hang_and_is_killed_with_the_rest(
    procs, marker, elasticrun, tmp_path
):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, ["--hang-timeout", "2"],
                        ["--mode", "stop", "--bad-rank", "0", "--at", "3", "--steps", "100000"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "hang" and fault["local_rank"] == 0
    [stopped] = [s for s in fault["stacks"] if s["local_rank"] == 0]
    # A stopped process runs no handler: the agent continued it for the dump.
    assert stopped["stopped"] and stopped["how"] == "faulthandler"
    assert "health_worker.py" in Path(stopped["file"]).read_text()


def test_a_nan_loss_is_a_fault_even_when_the_next_loss_is_finite(
    procs, marker, elasticrun, tmp_path
):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, [],
                        ["--mode", "nan", "--bad-rank", "1", "--at", "3", "--steps", "100000",
                         "--step-time", "0.01"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "non_finite_loss" and fault["local_rank"] == 1
    assert "NonFiniteLoss" in proc.stderr()


def test_non_finite_losses_are_ignored_when_the_monitor_is_off(procs, marker, elasticrun, tmp_path):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, ["--non-finite-loss", "off"],
                        ["--mode", "nan", "--bad-rank", "1", "--at", "3", "--steps", "20"])
    assert proc.popen.returncode == 0, proc.describe()
    assert not list(logs.glob("*/attempt_0/fault.json"))


def test_no_first_step_within_the_startup_limit_is_a_fault(procs, marker, elasticrun, tmp_path):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, ["--startup-timeout", "2"],
                        ["--mode", "startup"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "startup" and "published no step within" in fault["message"]


def test_a_long_marked_section_is_no_hang(procs, marker, elasticrun, tmp_path):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, ["--hang-timeout", "1"],
                        ["--mode", "section", "--at", "3", "--section-time", "3", "--steps", "8"])
    assert proc.popen.returncode == 0, proc.describe()
    assert not list(logs.glob("*/attempt_0/fault.json"))


def test_a_hang_costs_a_restart_and_the_restarted_job_finishes(
    procs, marker, elasticrun, tmp_path
):
    proc, logs, state = run(procs, marker, elasticrun, tmp_path,
                            ["--hang-timeout", "2", "--max-restarts", "1"],
                            ["--mode", "hang", "--bad-attempt", "0", "--at", "3", "--steps", "10"])
    assert proc.popen.returncode == 0, proc.describe()
    assert fault_record(logs, 0)["kind"] == "hang"
    assert not list(logs.glob("*/attempt_1/fault.json"))
    assert len(list(state.glob("pid.*.attempt1"))) == 2


def test_a_rank_that_never_enters_the_all_reduce_hangs_every_rank(
    procs, marker, elasticrun, tmp_path
):
    proc, logs, _ = run(procs, marker, elasticrun, tmp_path, ["--hang-timeout", "3"],
                        ["--torch", "--mode", "allreduce", "--bad-rank", "1", "--at", "5",
                         "--steps", "100000"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "hang"
    # Both ranks stopped at the same step; both stacks say where each is.
    stacks = {s["local_rank"]: Path(s["file"]).read_text() for s in fault["stacks"]}
    assert "all_reduce" in stacks[0]
    assert "all_reduce" not in stacks[1] and "health_worker.py" in stacks[1]
