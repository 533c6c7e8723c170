"""Rescues after a failure, under real elasticrun agents.

When a worker fails, the agent stops the others with --shutdown-signal;
workers that attached the SDK first get a short window in which a survivor
whose collective broke saves the state of the last step it completed
(CheckpointManager.rescue), and one whose rescue is under way is left to
finish it. Then examples/python/train_elastic.py, one of whose workers is
killed mid-run, resumes from that step instead of its last periodic
checkpoint, and trains exactly as a run that never failed; without the
rescue it resumes from its last periodic checkpoint, written in the
background (CheckpointManager.save_async), and trains as exactly.
"""

from __future__ import annotations

import json
import os
import signal
import time

import step_log
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
    RUN_ID,
    STEP_S,
    STEPS,
    TRAIN,
    check_run,
    elastic_job,
    events_of,
    finish,
    fixed_run,
    global_order,
    train_args,
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
    g, killed_at = kill_a_worker_mid_run(job, marker, log, steps=20)

    events = events_of(job.dir)
    rescues = [e for e in events if e["ev"] == "save" and e["why"] == "rescue"]
    assert len(rescues) == 1, rescues
    assert rescues[0]["t0"] >= killed_at
    resumed = [e for e in events if e["ev"] == "init" and e["gen"] > g]
    assert resumed and {e["from_step"] for e in resumed} == {rescues[0]["step"]}, resumed
    # The killed generation may have begun the step after the rescue's (its
    # records go out before the step's gradients are all-reduced); that
    # step ran again, and nothing else did.
    logged = step_log.by_step(log)
    repeated = [step for step, ranks in logged.items() if len({e["gen"] for e in ranks}) > 1]
    assert repeated in ([], [rescues[0]["step"] + 1]), repeated
    # The rescue kept the weights, the momentum and the schedule exactly.
    trained_as(log, want)


def test_a_stopped_worker_is_found_hung_and_its_peer_rescues_the_step_it_completed(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    # SIGSTOP, not a crash: nothing closes, the peer blocks in its
    # all_reduce. The stopped rank's agent finds the hang, the round ends,
    # the peer's SDK releases the all_reduce, and the peer saves its rescue.
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = elastic_job(procs, marker, elasticrun, tmp_path, store, "--max-restarts", "3",
                      "--hang-timeout", "3")
    g, stopped_at = kill_a_worker_mid_run(job, marker, log, steps=20, sig=signal.SIGSTOP)
    events = events_of(job.dir)
    rescues = [e for e in events if e["ev"] == "save" and e["why"] == "rescue"]
    assert len(rescues) == 1, rescues
    assert rescues[0]["t0"] >= stopped_at
    resumed = [e for e in events if e["ev"] == "init" and e["gen"] > g]
    assert resumed and {e["from_step"] for e in resumed} == {rescues[0]["step"]}, resumed
    trained_as(log, want)


def kill_a_worker_mid_run(job: Job, marker: str, log, steps: int,
                          sig: int = signal.SIGKILL) -> tuple[int, float]:
    """Runs the job on agents 1 and 2, sends rank 1's worker `sig` (SIGKILL:
    a crash, with nothing written) once `steps` steps are logged, and waits
    for the job to train at 2 again and end. Returns the generation and when."""
    job.start_agent(1)
    job.start_agent(2)
    g = wait_world(job, log, 2)
    wait_for(lambda: len(step_log.by_step(log)) >= steps or None, f"{steps} steps",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    victim = next(e["pid"] for e in events_of(job.dir)
                  if e["ev"] == "start" and e["gen"] == g and e["rank"] == 1)
    killed_at = time.time()
    os.kill(victim, sig)
    wait_world(job, log, 2, after_gen=g)
    finish(job, marker, {1: 0, 2: 0})
    return g, killed_at


def trained_as(log, want) -> None:
    """The last run of each step (steps after a restore ran again) trained
    exactly as the fixed run: the same world size throughout, so the very
    same samples and losses, bit for bit."""
    logged = step_log.by_step(log)
    last = {step: [e for e in ranks if e["gen"] == max(x["gen"] for x in ranks)]
            for step, ranks in logged.items()}
    check_run(last)
    for step in range(1, STEPS + 1):
        assert global_order(last[step]) == global_order(want[step]), step
        assert last[step][0]["loss"] == want[step][0]["loss"], step


def test_without_a_rescue_a_killed_worker_resumes_from_a_background_checkpoint_of_its_exact_step(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    # A periodic checkpoint every 4 steps, written while the next steps train.
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=TRAIN, extra=["--max-restarts", "3"],
              worker_args=train_args(tmp_path / "ckpt", log, "--step-s", STEP_S,
                                     "--events", tmp_path / "events", "--save-every", "4",
                                     "--no-rescue"))
    g, _ = kill_a_worker_mid_run(job, marker, log, steps=22)

    events = events_of(job.dir)
    saves = [e for e in events if e["ev"] == "save" and e["gen"] == g]
    assert saves and all(e["why"] == "periodic" and e["background"] for e in saves), saves
    assert not [e for e in events if e["ev"] == "save" and e["why"] == "rescue"]
    # The newest checkpoint published: the last one begun before the kill,
    # or the one before it when the kill cut that one's writing short.
    begun = max(e["step"] for e in saves)
    resumed = {e["from_step"] for e in events if e["ev"] == "init" and e["gen"] > g}
    assert resumed in ({begun}, {begun - 4}), (resumed, begun)
    assert min(resumed) >= 16
    # Every checkpoint held the state of its own step, not of the steps
    # trained while it was written.
    trained_as(log, want)
