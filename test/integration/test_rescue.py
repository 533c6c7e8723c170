"""Rescues after a failure, under real elasticrun agents.

When a worker fails, the agent stops the others with --shutdown-signal;
workers that attached the SDK first get a short window in which a survivor
whose collective broke saves the state of the last step it completed
(CheckpointManager.rescue), and one whose rescue is under way is left to
finish it. Then examples/python/train_elastic.py, one of whose workers is
killed mid-run, resumes from that step instead of its last periodic
checkpoint, and trains exactly as a run that never failed.
"""

from __future__ import annotations

import json
import os
import signal
import time

from conftest import WORKERS, elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    marker,  # noqa: F401 (fixture)
    shared_runs,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
    wait_for,
)
from test_train_elastic_python import (
    STEPS,
    check_run,
    elastic_job,
    events_of,
    finish,
    fixed_run,
    global_order,
    steps_logged,
    wait_world,
)

WINDOW_WORKER = WORKERS / "rescue_window_worker.py"


def test_after_a_failure_a_worker_saving_a_rescue_is_spared_the_stop_signal(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    # One node of four workers (a 1:2 job, so the agent is elastic): local
    # rank 0 fails; 1 saves a rescue; 2 attached the SDK but saves none; 3
    # did not attach.
    job = Job(procs, marker, elasticrun, tmp_path, "1:2", f"127.0.0.1:{store}",
              worker=WINDOW_WORKER, worker_args=[tmp_path / "events"],
              env={"ROLES": "fail,rescuer,idle,plain"})
    agent = job.start_agent(1, "--nproc-per-node", "4")
    assert agent.wait(GEN_TIMEOUT_S) == 1, agent.describe()
    events = [json.loads(line) for line in (tmp_path / "events" / "events.jsonl").read_text()
              .splitlines()]
    by_rank = {r: [e["event"] for e in events if e["local_rank"] == r] for r in (1, 2, 3)}
    # The rescuer was never signalled: it finished its rescue and left.
    assert by_rank[1] == ["ready", "rescuing", "rescued"], by_rank
    # The others were stopped: the one that did not attach at once, the
    # attached one only when the window closed without a rescue under way.
    assert by_rank[2] == ["ready", "sigterm"] and by_rank[3] == ["ready", "sigterm"], by_rank
    sigterm = {e["local_rank"]: e["t"] for e in events if e["event"] == "sigterm"}
    assert sigterm[3] < sigterm[2], events
    log = agent.stdout() + agent.stderr()
    assert "2 worker(s) may save a rescue: SIGTERM in 1000 ms" in log, agent.describe()
    assert "worker local rank 1 is saving a rescue: left to finish" in log, agent.describe()


def test_a_killed_worker_costs_no_step_and_the_job_trains_as_a_run_that_never_failed(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    # No periodic checkpoint (train_args: every 1,000 steps): without the
    # rescue the job would start again from step 0.
    job = elastic_job(procs, marker, elasticrun, tmp_path, store, "--max-restarts", "3")
    job.start_agent(1)
    job.start_agent(2)
    g = wait_world(job, log, 2)
    wait_for(lambda: len(steps_logged(log)) >= 20 or None, "20 steps", timeout=GEN_TIMEOUT_S,
             proc=job.agents[1])
    # Rank 1's worker: a crash, with nothing written.
    victim = next(e["pid"] for e in events_of(job.dir)
                  if e["ev"] == "start" and e["gen"] == g and e["rank"] == 1)
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    wait_world(job, log, 2, after_gen=g)
    finish(job, marker, {1: 0, 2: 0})

    events = events_of(job.dir)
    rescues = [e for e in events if e["ev"] == "save" and e["why"] == "rescue"]
    assert len(rescues) == 1, rescues
    assert rescues[0]["t0"] >= killed_at
    resumed = [e for e in events if e["ev"] == "init" and e["gen"] > g]
    assert resumed and {e["from_step"] for e in resumed} == {rescues[0]["step"]}, resumed
    # Each step's records: those of the last generation that ran it. The
    # killed generation may have begun the step after the rescue's (its
    # records go out before the step's gradients are all-reduced); that
    # step ran again, and nothing else did.
    logged = steps_logged(log)
    last = {step: [e for e in ranks if e["gen"] == max(x["gen"] for x in ranks)]
            for step, ranks in logged.items()}
    repeated = [step for step, ranks in logged.items() if len({e["gen"] for e in ranks}) > 1]
    assert repeated in ([], [rescues[0]["step"] + 1]), repeated
    check_run(last)
    # The same world size throughout, so the very same losses, bit for bit:
    # the rescue kept the weights, the momentum and the schedule exactly.
    for step in range(1, STEPS + 1):
        assert global_order(last[step]) == global_order(want[step]), step
        assert last[step][0]["loss"] == want[step][0]["loss"], step
