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

import step_log
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
        logged = step_log.by_step(directory / "log")
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

    got = step_log.by_step(log)
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
        assert len(processes_of_rank(pids, rank)) == 1, pids
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


def checked_reformed_run(logged: dict[int, list[dict]]) -> dict[int, list[dict]]:
    """The run as it counts (each step's last generation), checked as the
    continuity test checks it, with every rank of a step on equal weights."""
    got = last_generation_of_each_step(logged)
    check_run(got)
    check_same_params(got)
    return got


def processes_of_rank(pids: dict[tuple[int, int], set[int]], rank: int) -> set[int]:
    """The processes that trained as `rank`, in any generation."""
    return {pid for (_, r), ps in pids.items() if r == rank for pid in ps}


def test_survivors_of_a_node_killed_mid_step_go_on_in_the_same_process_from_the_last_whole_step(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    """With a checkpoint written in the background every other step, so
    that the loss usually finds one in flight: the survivors give it up
    (its connections shut down, never a listener) and park."""
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=TRAIN, extra=["--inprocess-restart"],
              worker_args=train_args(log, "--step-s", STEP_S, "--ckpt", tmp_path / "ckpt",
                                     "--save-every", "2"))
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    job.start_agent(3)
    g3 = wait_world(job, log, 3, after_gen=g2)
    # A few whole steps at 3 first, then the node goes at once, agent and
    # worker (its parent-death signal), in the middle of a step.
    first = min(s for s, ranks in step_log.by_step(log).items() if ranks[0]["gen"] == g3)
    wait_for(lambda: max(step_log.by_step(log)) >= first + 5, "steps at world size 3",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    job.agents[3].popen.send_signal(signal.SIGKILL)
    job.agents[3].wait(GEN_TIMEOUT_S)
    wait_world(job, log, 2, after_gen=g3)
    finish(job, marker, {1: 0, 2: 0})

    logged = step_log.by_step(log)
    got = checked_reformed_run(logged)
    assert [world for _, world, _ in generations(got)] == [2, 3, 2], generations(got)
    pids = pids_by_rank_and_gen(logged)
    assert len(set().union(*pids.values())) == 3, pids
    for rank in (0, 1):
        assert len(processes_of_rank(pids, rank)) == 1, pids
    check_as_fixed_run(got, want)


def test_a_killed_worker_starts_again_and_takes_the_state_from_the_survivor_which_goes_on(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = inprocess_job(procs, marker, elasticrun, tmp_path, store, "--max-restarts", "1")
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    wait_for(lambda: max(step_log.by_step(log)) >= 10, "ten steps", timeout=GEN_TIMEOUT_S,
             proc=job.agents[1])
    [victim] = {e["pid"] for ranks in step_log.by_step(log).values() for e in ranks if e["rank"] == 1}
    os.kill(victim, signal.SIGKILL)
    wait_world(job, log, 2, after_gen=g2)
    finish(job, marker, {1: 0, 2: 0})

    logged = step_log.by_step(log)
    got = checked_reformed_run(logged)
    pids = pids_by_rank_and_gen(logged)
    # Rank 0 is one process throughout; rank 1 is the killed one, then its
    # replacement, which started from the survivor's state, not step 0.
    assert len(processes_of_rank(pids, 0)) == 1, pids
    assert len(processes_of_rank(pids, 1)) == 2, pids
    later = [e for ranks in logged.values() for e in ranks if e["gen"] > g2]
    assert min(e["step"] for e in later) > 10, later[:2]
    check_as_fixed_run(got, want)


def test_every_worker_killed_at_once_starts_again_from_the_memory_tier_with_no_checkpoint_directory(  # noqa: E501
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    """No --ckpt: the periodic saves go to the agents' memory tiers only.
    Both workers are killed at once, so nobody holds state to share: the
    new workers load the newest snapshot from their nodes' memory and train
    on from it as the fixed run, not from step 0."""
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=TRAIN, extra=["--inprocess-restart", "--max-restarts", "1"],
              worker_args=train_args(log, "--step-s", STEP_S, "--save-every", "5"))
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    wait_for(lambda: max(step_log.by_step(log)) >= 12, "twelve steps", timeout=GEN_TIMEOUT_S,
             proc=job.agents[1])
    victims = {e["pid"] for ranks in step_log.by_step(log).values() for e in ranks}
    assert len(victims) == 2, victims
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    wait_world(job, log, 2, after_gen=g2)
    finish(job, marker, {1: 0, 2: 0})

    logged = step_log.by_step(log)
    got = checked_reformed_run(logged)
    later = [e for ranks in logged.values() for e in ranks if e["gen"] > g2]
    resumed = min(e["step"] for e in later)
    # From a periodic save (every 5 steps) of the memory tier, at step 10 or later.
    assert resumed > 10 and (resumed - 1) % 5 == 0, resumed
    pids = pids_by_rank_and_gen(logged)
    for rank in (0, 1):
        assert len(processes_of_rank(pids, rank)) == 2, pids
    check_as_fixed_run(got, want)
    assert not (tmp_path / "ckpt").exists()


def scale(procs, elasticctl, nodes: int, store: int) -> None:  # noqa: F811
    ctl = procs.run([elasticctl, "scale", "--nodes", str(nodes), "--rdzv-endpoint",
                     f"127.0.0.1:{store}", "--rdzv-id", RUN_ID], "elasticctl-scale",
                    timeout=GEN_TIMEOUT_S)
    assert ctl.popen.returncode == 0, ctl.describe()


def test_a_node_scaled_away_keeps_its_parked_worker_which_re_forms_when_scaled_back_and_a_killed_one_starts_warm(  # noqa: E501
        procs, marker, elasticrun, elasticctl, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    """elasticctl scale 3 -> 2 -> 3 with --warm-start, and periodic
    checkpoints written in the background across the rounds: the released
    node waits as a hot spare with its worker parked, and the same process
    comes back at the scale-up (no process starts). Then a worker is
    killed: its replacement starts in a warm interpreter and takes the
    survivors' state."""
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=TRAIN, extra=["--inprocess-restart", "--warm-start", "--max-restarts", "1"],
              worker_args=train_args(log, "--step-s", STEP_S, "--ckpt", tmp_path / "ckpt",
                                     "--save-every", "10"))
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = wait_world(job, log, 3)
    scale(procs, elasticctl, 2, store)
    g2 = wait_world(job, log, 2, after_gen=g3)
    scale(procs, elasticctl, 3, store)
    g3b = wait_world(job, log, 3, after_gen=g2)
    before = {e["pid"] for ranks in step_log.by_step(log).values() for e in ranks}
    [victim] = {e["pid"] for ranks in step_log.by_step(log).values() for e in ranks
                if e["gen"] == g3b and e["rank"] == 1}
    os.kill(victim, signal.SIGKILL)
    wait_world(job, log, 3, after_gen=g3b)
    finish(job, marker, {1: 0, 2: 0, 3: 0})

    logged = step_log.by_step(log)
    got = checked_reformed_run(logged)
    assert [world for _, world, _ in generations(got)][-4:] == [3, 2, 3, 3], generations(got)
    # Three processes until the kill (the spare's came back), one more after.
    assert len(before) == 3, before
    assert len({e["pid"] for ranks in logged.values() for e in ranks}) == 4
    said = {n: a.stdout() + a.stderr() for n, a in job.agents.items()}
    assert any("waits as a spare with 1 parked worker(s)" in s for s in said.values()), said
    # The first start and the replacement: every worker began in a warm interpreter.
    warm = [s.count("1 in warm interpreters") for s in said.values()]
    assert sum(warm) == 4, said
    # The background saves crossed the rounds: the last periodic one is in place.
    assert (tmp_path / "ckpt" / "latest").read_text().strip() == f"step_{STEPS:09d}"
    check_as_fixed_run(got, want)


def test_a_stopped_peer_is_killed_and_the_others_re_form_in_process_with_its_replacement(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    """A worker SIGSTOPped mid-run (alive, holding its sockets, answering
    nothing): the hang monitor ends the round, the stopped process is
    killed at once (it could neither park nor exit), and the survivors go
    on in their processes with its replacement, which takes their state."""
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    job = inprocess_job(procs, marker, elasticrun, tmp_path, store, "--hang-timeout", "3",
                        "--max-restarts", "2")
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = wait_world(job, log, 3)
    first = min(s for s, ranks in step_log.by_step(log).items() if ranks[0]["gen"] == g3)
    wait_for(lambda: max(step_log.by_step(log)) >= first + 5, "steps at world size 3",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    [victim] = {e["pid"] for ranks in step_log.by_step(log).values() for e in ranks
                if e["gen"] == g3 and e["rank"] == 2}
    os.kill(victim, signal.SIGSTOP)
    wait_for(lambda: any(e["gen"] > g3 for ranks in step_log.by_step(log).values() for e in ranks),
             "a step after the stopped worker's round", timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    finish(job, marker, {1: 0, 2: 0, 3: 0})

    logged = step_log.by_step(log)
    got = checked_reformed_run(logged)
    pids = pids_by_rank_and_gen(logged)
    for rank in (0, 1):
        assert len(processes_of_rank(pids, rank)) == 1, pids
    assert not [ps for (gen, r), ps in pids.items() if gen > g3 and victim in ps], pids
    said = "\n".join(a.stderr() for a in job.agents.values())
    assert f"(pid {victim}) is stopped: killing it" in said, said[-4000:]
    check_as_fixed_run(got, want)


def usage(pid: int) -> tuple[int, int, int]:
    """(open file descriptors, threads, resident kB) of a process."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines()
                  if ":" in line)
    return fds, int(status["Threads"]), int(status["VmRSS"].split()[0])


REFORM_CYCLES = 25  # a scale-down and a scale-up each: 50 re-formations
WARMUP_CYCLES = 5


def test_fifty_re_formations_in_a_row_leak_nothing_in_a_surviving_worker_or_its_agent(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    """elasticctl scale 3 -> 2 -> 3, 25 times, on hot spares: no process
    starts, node 1's worker re-forms 50 times. Its file descriptors and
    threads, and its agent's, are where they were after the first few
    cycles (PyTorch's and gloo's one-time allocations are done by then);
    its resident memory grows by no more than a few MB."""
    log = tmp_path / "log"
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=TRAIN, extra=["--inprocess-restart"],
              worker_args=["--steps", "1000000", "--step-s", "0.02", "--dataset", str(DATASET),
                           "--global-batch", str(GLOBAL_BATCH), "--step-log", log])
    for n in (1, 2, 3):
        job.start_agent(n)
    gen = wait_world(job, log, 3)
    [worker] = {e["pid"] for ranks in step_log.by_step(log).values() for e in ranks
                if e["gen"] == gen and e["rank"] == 0}
    agent = job.agents[1].popen.pid
    seen = {}
    for cycle in range(1, REFORM_CYCLES + 1):
        scale(procs, elasticctl, 2, store)
        gen = wait_world(job, log, 2, after_gen=gen)
        scale(procs, elasticctl, 3, store)
        gen = wait_world(job, log, 3, after_gen=gen)
        if cycle in (WARMUP_CYCLES, REFORM_CYCLES):
            seen[cycle] = (usage(worker), usage(agent))
    for n in (1, 2, 3):
        job.agents[n].popen.send_signal(signal.SIGTERM)
    finish(job, marker, {1: 128 + signal.SIGTERM, 2: 128 + signal.SIGTERM,
                         3: 128 + signal.SIGTERM})

    logged = step_log.by_step(log)
    check_same_params(logged)
    # Every re-formation took place in process: three workers in all.
    assert len({e["pid"] for ranks in logged.values() for e in ranks}) == 3
    (w0, a0), (w1, a1) = seen[WARMUP_CYCLES], seen[REFORM_CYCLES]
    # A connection or a thread of the moment (a rendezvous' store client, a
    # heartbeat) may be open at either look: a margin of two, where a leak of
    # one per re-formation would be forty.
    for (before, after), who in (((w0, w1), "worker"), ((a0, a1), "agent")):
        assert after[0] <= before[0] + 2 and after[1] <= before[1] + 2, \
            f"{who} (fds, threads, kB): {before} after {WARMUP_CYCLES} cycles, " \
            f"{after} after {REFORM_CYCLES}"
    assert w1[2] - w0[2] < 8 * 1024, f"worker resident kB: {w0[2]}, then {w1[2]}"
