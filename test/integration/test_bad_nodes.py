"""Bad nodes in an elastic job (docs/health.md): a node whose workers keep
failing is excluded for a cooldown and comes back after it (or when an
operator readmits it); a straggler is excluded and a spare takes its place.

Real agents on 127.0.0.N, one worker each (workers/bad_node_worker.py: the
SDK, no torch), around an `elasticctl store`. The worker that misbehaves is
the one whose agent's pid the test lists in a file. Windows are shortened;
timeouts only bound hangs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import WORKERS, elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    marker,  # noqa: F401 (fixture)
    wait_for,
    wait_marked_gone,
)

WORKER = WORKERS / "bad_node_worker.py"
RUN_ID = "bad-nodes"


def events(directory: Path) -> list[dict]:
    path = directory / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def worlds(directory: Path) -> dict[int, set[int]]:
    """Generation -> the agents (pids) whose workers started in it."""
    out: dict[int, set[int]] = {}
    for e in events(directory):
        if e["event"] == "start":
            out.setdefault(e["gen"], set()).add(e["agent"])
    return out


def status(elasticctl, store: int, job_may_be_new: bool = False) -> dict:  # noqa: F811
    """`elasticctl status --json`; before the agents made the job, with
    job_may_be_new, an empty status."""
    out = subprocess.run(
        [elasticctl, "status", "--rdzv-endpoint", f"127.0.0.1:{store}", "--rdzv-id", RUN_ID,
         "--json"], capture_output=True, text=True, timeout=60)
    if job_may_be_new and "no job" in out.stderr:
        return {"excluded": []}
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def finish(job: Job, marker: str) -> None:  # noqa: F811
    for n, agent in job.agents.items():
        assert agent.wait(GEN_TIMEOUT_S) == 0, agent.describe()
    left = wait_marked_gone(marker)
    assert not left, "processes of the job left behind:\n  " + "\n  ".join(left)


def test_a_node_that_keeps_failing_is_excluded_and_rejoins_after_its_cooldown(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    ev = tmp_path / "ev"
    ev.mkdir()
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=WORKER, worker_args=[ev, "--crashes", "2", "--steps", "200"],
              extra=["--max-restarts", "10", "--exclude-after", "2", "--exclude-window", "60",
                     "--exclude-cooldown", "8"])
    for n in (1, 2, 3):
        job.start_agent(n)
    bad = job.agents[3].pid
    (ev / "bad").write_text(f"{bad}\n")
    # Two crashes of agent 3's worker exclude its host; the job goes on at two.
    wait_for(lambda: len([e for e in events(ev) if e["event"] == "crash"]) == 2 or None,
             "two crashes", timeout=GEN_TIMEOUT_S)
    without = wait_for(
        lambda: next((g for g, a in worlds(ev).items() if a == {job.agents[1].pid,
                                                              job.agents[2].pid}
                      and g > max(e["gen"] for e in events(ev) if e["event"] == "crash")),
                     None),
        "a round without the failing node", timeout=GEN_TIMEOUT_S)
    excluded = status(elasticctl, store)["excluded"]
    assert [e["host"] for e in excluded] == ["127.0.0.3"], excluded
    assert "2 faults within 60 s" in excluded[0]["reason"]
    # After the cooldown it is capacity again: the job grows onto it.
    wait_for(lambda: next((g for g, a in worlds(ev).items()
                           if g > without and bad in a and len(a) == 3), None),
             "the node back after its cooldown", timeout=GEN_TIMEOUT_S)
    assert status(elasticctl, store)["excluded"] == []
    finish(job, marker)


def test_an_operator_readmits_an_excluded_node_before_its_cooldown_ends(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    ev = tmp_path / "ev"
    ev.mkdir()
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=WORKER, worker_args=[ev, "--crashes", "1", "--steps", "200"],
              extra=["--max-restarts", "10", "--exclude-after", "1",
                     "--exclude-cooldown", "3600"])
    for n in (1, 2, 3):
        job.start_agent(n)
    bad = job.agents[3].pid
    (ev / "bad").write_text(f"{bad}\n")
    wait_for(lambda: status(elasticctl, store, True)["excluded"] or None, "the exclusion",
             timeout=GEN_TIMEOUT_S)
    out = subprocess.run(
        [elasticctl, "readmit", "--rdzv-endpoint", f"127.0.0.1:{store}", "--rdzv-id", RUN_ID,
         "--host", "127.0.0.3"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "readmitted 127.0.0.3" in out.stdout
    crashed = max(e["gen"] for e in events(ev) if e["event"] == "crash")
    wait_for(lambda: next((g for g, a in worlds(ev).items() if g > crashed and bad in a), None),
             "the readmitted node back in the job", timeout=GEN_TIMEOUT_S)
    # A host the job never heard of is an error that says which it knows.
    out = subprocess.run(
        [elasticctl, "readmit", "--rdzv-endpoint", f"127.0.0.1:{store}", "--rdzv-id", RUN_ID,
         "--host", "10.9.9.9"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "127.0.0.3" in out.stderr, out.stderr
    finish(job, marker)


def test_a_straggler_is_excluded_and_a_spare_takes_its_place(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    ev = tmp_path / "ev"
    ev.mkdir()
    job = Job(procs, marker, elasticrun, tmp_path, "3:3", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=WORKER, worker_args=[ev, "--slow", "4", "--steps", "300"],
              extra=["--straggler-factor", "2", "--straggler-points", "3",
                     "--exclude-cooldown", "3600"])
    for n in (1, 2, 3):
        job.start_agent(n)
    slow = job.agents[3].pid
    (ev / "slow").write_text(f"{slow}\n")
    first = wait_for(lambda: next((g for g, a in worlds(ev).items() if len(a) == 3), None),
                     "three workers", timeout=GEN_TIMEOUT_S)
    # With no spare and no room to shrink, the straggler stays: ending the
    # round would only readmit it.
    wait_for(lambda: any("it stays: no spare waits" in a.stderr() for a in job.agents.values()),
             "the leader keeping the straggler", timeout=GEN_TIMEOUT_S)
    assert max(worlds(ev)) == first
    job.start_agent(4)  # the spare
    spare = job.agents[4].pid
    replaced = wait_for(
        lambda: next((g for g, a in worlds(ev).items()
                      if g > first and spare in a and len(a) == 3), None),
        "the spare in the slow node's place", timeout=GEN_TIMEOUT_S)
    assert slow not in worlds(ev)[replaced]
    [excluded] = status(elasticctl, store)["excluded"]
    assert excluded["host"] == "127.0.0.3" and excluded["reason"].startswith("straggler:")
    finish(job, marker)


def test_in_an_elastic_job_the_restart_policy_escalates_across_nodes_and_then_fails_the_job(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    # Agent 2's worker crashes in every round; the closer of each next round
    # applies the job config's policy to the counts it keeps in the store:
    # in place, full-job restart, in place, then no full-job restart left.
    ev = tmp_path / "ev"
    ev.mkdir()
    config = tmp_path / "job.yaml"
    config.write_text("runPolicy:\n  restartPolicy:\n    numRestartBeforeFullJobRestart: 1\n"
                      "    evalPeriodSeconds: 600\n    maxFullJobRestarts: 1\n")
    job = Job(procs, marker, elasticrun, tmp_path, "2:2", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=WORKER, worker_args=[ev, "--crashes", "100", "--steps", "200"],
              extra=["--config", config, "--exclude-after", "0"])
    for n in (1, 2):
        job.start_agent(n)
    (ev / "bad").write_text(f"{job.agents[2].pid}\n")
    for n in (1, 2):
        assert job.agents[n].wait(GEN_TIMEOUT_S * 2) == 1, job.agents[n].describe()
    crashes = [e for e in events(ev) if e["event"] == "crash"]
    assert len(crashes) == 4, crashes
    logs = job.agents[1].stderr() + job.agents[2].stderr()
    assert logs.count("a restart in place:") == 2, logs
    # The closer's decision once, and every agent discarding its state.
    assert logs.count("a full-job restart: this node's warm interpreters start afresh") == 2, logs
    assert logs.count("a full-job restart:") == 3, logs
    assert "maxFullJobRestarts" in logs
    left = wait_marked_gone(marker)
    assert not left, "processes of the job left behind:\n  " + "\n  ".join(left)
