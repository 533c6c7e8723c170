"""The agents' event log (--event-log, --event-log-handler console;
docs/events.md) from real jobs: an elastic job that grows and is released
back, whose leader's log is the job's history in order, and a fixed job
whose worker fails once, whose SDK workers' progress and marked section
are recorded. Every line of every log must parse with the common fields,
its seq without gaps.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marked_pids,
    marker,  # noqa: F401 (fixture)
    wait_for,
)
from conftest import REPO

COMMON = ["v", "seq", "time", "mono_s", "node", "host", "event"]


def read_log(path: Path) -> list[dict]:
    """The log's events, checking what every line must have."""
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert events, f"{path} is empty"
    for i, e in enumerate(events):
        assert list(e)[:len(COMMON)] == COMMON, e
        assert e["v"] == 1 and e["seq"] == i, (i, e)
        assert e["time"].endswith("Z") and len(e["time"]) == 24, e
    assert [e["mono_s"] for e in events] == sorted(e["mono_s"] for e in events)
    assert len({e["node"] for e in events}) == 1
    assert events[0]["event"] == "agent_start" and events[-1]["event"] == "agent_end"
    return events


def in_order(events: list[dict], wanted: list[tuple[str, dict]]) -> None:
    """`wanted` (type, fields it must have) occurs in `events` in this order."""
    i = 0
    for e in events:
        if i < len(wanted):
            kind, fields = wanted[i]
            if e["event"] == kind and all(e.get(k) == v for k, v in fields.items()):
                i += 1
    summary = [(e["event"], e.get("kind") or e.get("outcome") or e.get("nodes")) for e in events]
    assert i == len(wanted), f"missing {wanted[i]} after {wanted[:i]}\nin {summary}"


def test_the_leaders_log_holds_a_grow_and_a_release_in_order(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id="ev")
    logs = {n: tmp_path / f"agent{n}.jsonl" for n in (1, 2, 3)}
    job.start_agent(1, "--event-log", str(logs[1]))
    job.start_agent(2, "--event-log", str(logs[2]))
    g2 = job.wait_steady(2)
    job.start_agent(3, "--event-log", str(logs[3]))
    g3 = job.wait_steady(3, after_gen=g2)
    leader = job.agent_of(g3, 0)
    p = procs.run([elasticctl, "release", "--nodes", "1", "--rdzv-endpoint",
                   f"127.0.0.1:{store}", "--rdzv-id", "ev"], "release", timeout=GEN_TIMEOUT_S)
    assert p.popen.returncode == 0, p.describe()
    job.wait_steady(2, after_gen=g3)
    # The released node waits as a spare; the job's end lets it go too.
    job.finish({1: 0, 2: 0, 3: 0})

    events = {n: read_log(path) for n, path in logs.items()}
    history = events[leader]
    in_order(history, [
        ("agent_start", {"backend": "c10d", "min_nodes": 2, "max_nodes": 3}),
        ("round_start", {"nodes": 2, "group_rank": 0}),
        ("workers_start", {}),
        ("waiting", {"waiting": 1}),
        ("policy_decision", {"kind": "scale_up", "target": 3, "took_effect": True}),
        ("workers_end", {"outcome": "stopped"}),
        ("round_end", {"kind": "scale_up"}),
        ("round_start", {"nodes": 3, "group_rank": 0}),
        ("operator_request", {"release": 1}),
        ("policy_decision", {"kind": "scale_down", "release": 1}),
        ("round_end", {"kind": "scale_down", "release": 1}),
        ("round_start", {"nodes": 2, "group_rank": 0}),
        ("workers_end", {"outcome": "succeeded"}),
        ("agent_end", {"exit_code": 0}),
    ])
    # The followers record their own rounds, not the leader's observations.
    for n in (1, 2, 3):
        if n != leader:
            assert not [e for e in events[n] if e["event"] == "policy_decision"], events[n]
            assert [e for e in events[n] if e["event"] == "round_start"], events[n]


WORKER = """
import os, sys, time
import elasticrun
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0:
    if rank == 1:
        sys.exit(3)
    time.sleep(120)  # stopped by the agent once rank 1 fails
for step in range(64):
    elasticrun.step(step, loss=1.0 / (step + 1), tokens_per_s=100.0)
    if step == 20:
        with elasticrun.section("ckpt"):
            time.sleep(0.5)
    time.sleep(0.1)
"""


def test_a_fixed_jobs_failure_restart_progress_and_section_are_recorded_in_the_file_and_on_stderr(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    log = tmp_path / "events.jsonl"
    env = launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(REPO / "python"))
    proc = procs.run([elasticrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                      "--monitor-interval", "0.1", "--event-log", log,
                      "--event-log-handler", "console", script], "agent",
                     timeout=RUN_TIMEOUT_S, env=env)
    assert proc.popen.returncode == 0, proc.describe()
    events = read_log(log)
    in_order(events, [
        ("agent_start", {"backend": "standalone", "nproc_per_node": 2}),
        ("round_start", {"restart_count": 0, "world_size": 2}),
        ("workers_start", {"restart_count": 0}),
        ("workers_end", {"outcome": "failed", "restart_count": 0}),
        ("restart_decision", {"action": "in_place"}),
        ("round_start", {"restart_count": 1}),
        ("workers_start", {"restart_count": 1}),
        ("progress", {"restart_count": 1}),
        ("section", {"name": "ckpt", "local_rank": 0}),
        ("workers_end", {"outcome": "succeeded", "restart_count": 1}),
        ("agent_end", {"exit_code": 0}),
    ])
    failed = next(e for e in events if e["event"] == "workers_end")
    assert failed["failures"][0]["rank"] == 1 and failed["failures"][0]["exit_code"] == 3
    start = next(e for e in events if e["event"] == "workers_start")
    assert len(start["pids"]) == 2 and start["spawn_s"] >= 0
    progress = [e for e in events if e["event"] == "progress"]
    assert progress[-1]["tokens_per_s"] == 200.0 and len(progress[-1]["steps"]) == 2
    assert any("steps_per_s" in e for e in progress), progress
    sections = [e for e in events if e["event"] == "section"]
    assert {e["local_rank"] for e in sections} == {0, 1}
    assert all(0.4 <= e["seconds"] < 5 for e in sections), sections
    # --event-log-handler console: the same lines on stderr.
    console = [line for line in proc.stderr().splitlines() if line.startswith('{"v":1,')]
    assert console == log.read_text().splitlines()


def test_an_event_log_that_cannot_be_opened_exits_2_and_starts_nothing(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    script = tmp_path / "worker.py"
    ran = tmp_path / "ran"
    script.write_text(f"open({str(ran)!r}, 'w').write('1')\n")
    env = launcher_env(marker, tmp_path / "tmp")
    proc = procs.run([elasticrun, "--standalone", "--event-log", tmp_path / "no" / "events.jsonl",
                      script], "agent", timeout=RUN_TIMEOUT_S, env=env)
    assert proc.popen.returncode == 2, proc.describe()
    assert "--event-log: cannot open the event log" in proc.stderr(), proc.describe()
    assert not ran.exists()
    wait_for(lambda: not marked_pids(marker) or None, "nothing left running", timeout=10)
