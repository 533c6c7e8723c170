"""--inprocess-restart: examples/python/train_inprocess.py under real
elasticrun agents whose surviving workers re-form in process.

The job and its checks are test_train_elastic_python.py's (a global batch
of 48 over an epoch of 480 samples; every step once, by every rank of one
generation, each sample once per epoch, the same sample order and losses
as a fixed run of 2 ranks under torchrun). What is new: every line carries
the worker's pid, so the tests see that a worker which was in a round
before is the same process in the next, and the hash of the parameters
each rank starts the step from, equal on every rank of the step bit for
bit (a joiner's weights came from a survivor).
"""

from __future__ import annotations

import math
import os
import signal
from collections import defaultdict
from pathlib import Path

from conftest import REPO, elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, PYTHON_SDK, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    shared_runs,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
    wait_for,
)
from test_train_elastic_python import (
    DATASET,
    GLOBAL_BATCH,
    LOSS_REL_TOL,
    LR,
    STEP_S,
    STEPS,
    check_run,
    finish,
    generations,
    global_order,
    steps_logged,
    two_four_three_two,
    wait_world,
)

TRAIN = REPO / "examples" / "python" / "train_inprocess.py"
RUN_ID = "train-inprocess"


def train_args(log: Path, *extra) -> list:
    return ["--steps", str(STEPS), "--dataset", str(DATASET), "--global-batch", str(GLOBAL_BATCH),
            "--lr", str(LR), "--seed", "7", "--step-log", log, *extra]


def fixed_run(shared_runs, torchrun):  # noqa: F811
    """train_inprocess.py at 2 ranks from start to end under torchrun."""

    def make(procs, marker, directory):
        env = launcher_env(marker, directory / "tmp", OMP_NUM_THREADS="1",
                           PYTHONPATH=str(PYTHON_SDK))
        proc = procs.spawn([torchrun, "--standalone", "--nproc-per-node", "2", TRAIN,
                            *train_args(directory / "log")], "torchrun-fixed", env=env)
        assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
        assert f"[train] done: {STEPS} steps" in proc.stdout(), proc.describe()
        logged = steps_logged(directory / "log")
        check_run(logged)
        return logged

    return shared_runs.get("inprocess-fixed", make)


def inprocess_job(procs, marker, elasticrun, tmp_path, store, *extra) -> Job:  # noqa: F811
    return Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
               worker=TRAIN, extra=["--inprocess-restart", *extra],
               worker_args=train_args(tmp_path / "log", "--step-s", STEP_S))


def pids_by_rank_and_gen(logged: dict[int, list[dict]]) -> dict[tuple[int, int], set[int]]:
    out: dict[tuple[int, int], set[int]] = defaultdict(set)
    for ranks in logged.values():
        for e in ranks:
            out[(e["gen"], e["rank"])].add(e["pid"])
    return out


def check_as_fixed_run(got: dict[int, list[dict]], want: dict[int, list[dict]]) -> None:
    """The same samples in the same global order at every step as the fixed
    run, and losses within the continuity test's tolerance."""
    for step in range(1, STEPS + 1):
        assert global_order(got[step]) == global_order(want[step]), step
        mine, theirs = got[step][0]["loss"], want[step][0]["loss"]
        assert math.isclose(mine, theirs, rel_tol=LOSS_REL_TOL), (step, mine, theirs)


def check_same_params(logged: dict[int, list[dict]]) -> None:
    """Every rank of a step starts it from the same weights, bit for bit."""
    for step, ranks in sorted(logged.items()):
        assert len({e["params"] for e in ranks}) == 1, (step, ranks)


def test_survivors_of_a_join_a_leave_and_a_release_go_on_in_the_same_process_and_train_as_the_fixed_run(  # noqa: E501
        procs, marker, elasticrun, elasticctl, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = inprocess_job(procs, marker, elasticrun, tmp_path, store, "--scaling-timeout", "3")
    two_four_three_two(procs, elasticctl, job, log, store, RUN_ID)
    finish(job, marker, {1: 0, 2: 0, 3: 0})

    got = steps_logged(log)
    check_run(got)
    check_same_params(got)
    gens = generations(got)
    assert [world for _, world, _ in gens] == [2, 4, 3, 2], gens
    # One process per node for the whole job: four nodes took part, four
    # worker processes ran. Nodes 1 and 2 joined first and keep group ranks
    # 0 and 1 (the two that joined together take 2 and 3 in either order,
    # and the one left after the leave becomes 2).
    pids = pids_by_rank_and_gen(got)
    assert len(set().union(*pids.values())) == 4, pids
    for rank in (0, 1):
        assert len({pid for (gen, r), ps in pids.items() if r == rank for pid in ps}) == 1, pids
    said = "\n".join(p.stdout() + p.stderr() for p in job.agents.values())
    assert "parked worker(s) go on in the new round" in said, said[-4000:]
    check_as_fixed_run(got, want)


def last_generation_of_each_step(logged: dict[int, list[dict]]) -> dict[int, list[dict]]:
    """A step the survivors began but could not finish when a peer died is
    logged twice: by the round that broke, and again by the next, which
    redid it from the last whole step. The later round's lines count."""
    out = {}
    for step, ranks in logged.items():
        last = max(e["gen"] for e in ranks)
        out[step] = [e for e in ranks if e["gen"] == last]
    return out


def test_survivors_of_a_node_killed_mid_step_go_on_in_the_same_process_from_the_last_whole_step(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = inprocess_job(procs, marker, elasticrun, tmp_path, store)
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    job.start_agent(3)
    g3 = wait_world(job, log, 3, after_gen=g2)
    # A few whole steps at 3 first, then the node goes at once, agent and
    # worker (its parent-death signal), in the middle of a step.
    first = min(s for s, ranks in steps_logged(log).items() if ranks[0]["gen"] == g3)
    wait_for(lambda: max(steps_logged(log)) >= first + 5, "steps at world size 3",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    job.agents[3].popen.send_signal(signal.SIGKILL)
    job.agents[3].wait(GEN_TIMEOUT_S)
    wait_world(job, log, 2, after_gen=g3)
    finish(job, marker, {1: 0, 2: 0})

    logged = steps_logged(log)
    got = last_generation_of_each_step(logged)
    check_run(got)
    check_same_params(got)
    assert [world for _, world, _ in generations(got)] == [2, 3, 2], generations(got)
    pids = pids_by_rank_and_gen(logged)
    assert len(set().union(*pids.values())) == 3, pids
    for rank in (0, 1):
        assert len({pid for (gen, r), ps in pids.items() if r == rank for pid in ps}) == 1, pids
    check_as_fixed_run(got, want)


def test_a_killed_worker_starts_again_and_takes_the_state_from_the_survivor_which_goes_on(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = inprocess_job(procs, marker, elasticrun, tmp_path, store, "--max-restarts", "1")
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    wait_for(lambda: max(steps_logged(log)) >= 10, "ten steps", timeout=GEN_TIMEOUT_S,
             proc=job.agents[1])
    [victim] = {e["pid"] for ranks in steps_logged(log).values() for e in ranks if e["rank"] == 1}
    os.kill(victim, signal.SIGKILL)
    wait_world(job, log, 2, after_gen=g2)
    finish(job, marker, {1: 0, 2: 0})

    logged = steps_logged(log)
    got = last_generation_of_each_step(logged)
    check_run(got)
    check_same_params(got)
    pids = pids_by_rank_and_gen(logged)
    # Rank 0 is one process throughout; rank 1 is the killed one, then its
    # replacement, which started from the survivor's state, not step 0.
    assert len({pid for (gen, r), ps in pids.items() if r == 0 for pid in ps}) == 1, pids
    assert len({pid for (gen, r), ps in pids.items() if r == 1 for pid in ps}) == 2, pids
    later = [e for ranks in logged.values() for e in ranks if e["gen"] > g2]
    assert min(e["step"] for e in later) > 10, later[:2]
    check_as_fixed_run(got, want)
