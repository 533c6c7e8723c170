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
    # A stopped process runs no handler, and continuing it could let the job
    # run on: py-spy reads it as it is.
    assert stopped["stopped"] and stopped["how"] == "py-spy"
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


# --- HyperPod's log monitoring rules (runPolicy.logMonitoringConfiguration)

LOG_WORKER = WORKERS / "log_rule_worker.py"


def run_rules(procs, marker, elasticrun, tmp_path: Path, rules_yaml: str, worker_args: list,
              flags: list | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "job.yaml"
    config.write_text("runPolicy:\n  logMonitoringConfiguration:\n" + rules_yaml)
    logs = tmp_path / "logs"
    proc = procs.spawn(
        [elasticrun, "--standalone", "--nproc-per-node", "2", "--log-dir", logs,
         "--config", config, *(flags or []), LOG_WORKER, *worker_args],
        "agent", env=launcher_env(marker, tmp_path / "tmp"), cwd=tmp_path)
    proc.wait(RUN_TIMEOUT_S)
    return proc, logs


def test_a_fault_on_match_rule_stops_the_job_at_an_out_of_memory_line(
    procs, marker, elasticrun, tmp_path
):
    # HyperPod's documented "GPU Error" rule; the error is on rank 1's
    # stderr, which faultOnMatch rules read on every rank.
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path, """\
    - name: "GPU Error"
      logPattern: ".*RuntimeError.*out of memory.*"
      faultOnMatch: true
""", ["--mode", "oom", "--rank", "1", "--seconds", "60"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "log_fault" and fault["reason"] == "LogFault_GPU Error"
    assert fault["local_rank"] == 1
    assert "CUDA out of memory" in fault["message"]
    # No SDK: the stacks come from py-spy.
    [stack] = [s for s in fault["stacks"] if s["local_rank"] == 1]
    assert stack["how"] == "py-spy", stack
    assert "log_rule_worker.py" in Path(stack["file"]).read_text()


def test_hyperpods_job_start_rule_faults_a_job_that_never_prints_its_start(
    procs, marker, elasticrun, tmp_path
):
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path, """\
    - name: "JobStart"
      logPattern: ".*Experiment configuration.*"
      expectedStartCutOffInSeconds: 2
""", ["--mode", "silent", "--seconds", "60"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["kind"] == "log_hang" and fault["reason"] == "LogHang_JobStart"
    assert fault["local_rank"] == 0


def test_hyperpods_hang_rule_faults_when_batches_stop_coming(procs, marker, elasticrun, tmp_path):
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path, """\
    - name: "JobHangingDetection"
      logPattern: ".*\\\\[Epoch 0 Batch \\\\d+.*'training_loss_step': (\\\\d+(\\\\.\\\\d+)?).*"
      expectedRecurringFrequencyInSeconds: 1
      expectedStartCutOffInSeconds: 10
""", ["--mode", "batches", "--batches", "10", "--seconds", "60"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["reason"] == "LogHang_JobHangingDetection", fault


def test_hyperpods_low_throughput_rule_needs_its_points_in_a_row(
    procs, marker, elasticrun, tmp_path
):
    rule = """\
    - name: "LowThroughputDetection"
      logPattern: ".*\\\\[Epoch 0 Batch \\\\d+.*'samples\\\\/sec': (\\\\d+(\\\\.\\\\d+)?).*"
      metricThreshold: 80
      operator: "lteq"
      metricEvaluationDataPoints: 5
"""
    # Four slow batches, then a fast one, again and again: never five in a row.
    rates = ",".join(["50"] * 4 + ["100"]) * 3 + ",100"
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path / "ok", rule,
                           ["--mode", "batches", "--rates", rates, "--batches", "20",
                            "--seconds", "3"])
    assert proc.popen.returncode == 0, proc.describe()
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path / "slow", rule,
                           ["--mode", "batches", "--rates", "100,100,80", "--seconds", "60"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["reason"] == "LogSlow_LowThroughputDetection"


def test_a_checkpoint_rule_with_a_long_first_interval_faults_when_checkpoints_stop(
    procs, marker, elasticrun, tmp_path
):
    # NoS3CheckpointingDetection, scaled: 1800 s for the first, 600 s after.
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path, """\
    - name: "NoS3CheckpointingDetection"
      logPattern: ".*The checkpoint is finalized. All shards is written.*"
      expectedRecurringFrequencyInSeconds: 1
      expectedStartCutOffInSeconds: 3
""", ["--mode", "checkpoints", "--batches", "4", "--seconds", "60"])
    assert proc.popen.returncode == 1, proc.describe()
    fault = fault_record(logs)
    assert fault["reason"] == "LogHang_NoS3CheckpointingDetection"
    assert "checkpoint is finalized" in fault["message"]


def test_a_stream_a_rule_reads_reaches_the_console_exactly_as_without_rules(
    procs, marker, elasticrun, tmp_path
):
    rule = """\
    - name: "GPU Error"
      logPattern: ".*out of memory.*"
      faultOnMatch: true
"""
    with_rules, _ = run_rules(procs, marker, elasticrun, tmp_path / "with", rule,
                              ["--mode", "console", "--rank", "0", "--seconds", "1"])
    without, _ = run_rules(procs, marker, elasticrun, tmp_path / "without", "    []\n",
                           ["--mode", "console", "--rank", "0", "--seconds", "1"])
    assert with_rules.popen.returncode == 0 and without.popen.returncode == 0
    assert with_rules.stdout() == without.stdout()
    assert "progress 100%" in with_rules.stdout()
    assert with_rules.stdout().endswith("no newline at the end")
    assert "a line on stderr" in with_rules.stderr()


def test_a_rule_re2_cannot_compile_is_refused_before_anything_starts(
    procs, marker, elasticrun, tmp_path
):
    proc, logs = run_rules(procs, marker, elasticrun, tmp_path, """\
    - name: "Lookahead"
      logPattern: ".*(?=loss).*"
      faultOnMatch: true
""", ["--mode", "silent", "--seconds", "60"])
    assert proc.popen.returncode == 2, proc.describe()
    assert "job.yaml, line 3: runPolicy.logMonitoringConfiguration" in proc.stderr()
    assert not logs.exists()


# --- The restart policy (runPolicy.restartPolicy, jobMaxRetryCount)


def test_the_restart_policy_escalates_to_a_full_job_restart_then_fails_the_job(
    procs, marker, elasticrun, tmp_path
):
    config = tmp_path / "job.yaml"
    config.write_text("""\
runPolicy:
  restartPolicy:
    numRestartBeforeFullJobRestart: 1
    evalPeriodSeconds: 600
    maxFullJobRestarts: 1
""")
    proc, logs, state = run(procs, marker, elasticrun, tmp_path, ["--config", config],
                            ["--mode", "crash", "--bad-attempt", "-1", "--at", "2"])
    assert proc.popen.returncode == 1, proc.describe()
    err = proc.stderr()
    # Attempt 0 fails: a restart in place; 1: the in-place restarts are used,
    # a full-job restart, which starts them again; 2: in place; 3: no
    # full-job restart left in the window.
    assert err.count("restarting workers: restart in place 1 of 1") == 2, err
    assert err.count("a full-job restart:") == 1, err
    assert "no restart: " in err and "maxFullJobRestarts" in err
    assert sorted({p.name.rsplit(".", 1)[1] for p in state.glob("pid.*")}) == [
        "attempt0", "attempt1", "attempt2", "attempt3"]


def test_job_max_retry_count_caps_the_restarts(procs, marker, elasticrun, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("runPolicy:\n  jobMaxRetryCount: 1\n")
    proc, logs, state = run(procs, marker, elasticrun, tmp_path, ["--config", config],
                            ["--mode", "crash", "--bad-attempt", "-1", "--at", "2"])
    assert proc.popen.returncode == 1, proc.describe()
    assert sorted({p.name.rsplit(".", 1)[1] for p in state.glob("pid.*")}) == [
        "attempt0", "attempt1"]
