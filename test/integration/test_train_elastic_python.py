"""examples/python/train_elastic.py under real elasticrun agents, resized
while it trains, against the same job at a fixed size under torchrun.

Agents run on 127.0.0.x addresses of this machine, one gloo worker each,
around `elasticctl store` (elastic_job.Job, as in test_elastic_membership.py).
Every rank logs each step (--step-log: its sample indices in global order,
the loss, the learning rate, its micro-batch) and its stops and loads
(--events). The tests wait for the log to show each new world size before
they cause the next event; --step-s only paces the steps so that an event
lands while the job trains. Timeouts bound hangs only.

The job: a global batch of 48 over an epoch of 480 samples (10 steps), so
the resizes fall in different epochs and mid-epoch.
"""

from __future__ import annotations

import json
import math
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
    wait_marked_gone,
)

TRAIN = REPO / "examples" / "python" / "train_elastic.py"
GLOBAL_BATCH = 48
DATASET = 480
STEPS = 120
LR = 0.05
# Pacing of the elastic runs: about 8 steps a second, so the few steps a
# scale event takes to reach its agreed stop leave most of the run to train.
STEP_S = "0.1"
RUN_ID = "train-python"

# How far the loss of the resized run may drift from the fixed run's. Not
# bitwise: at 4 and 3 ranks each rank sums other samples (6 x 2 and 8 x 2
# per rank instead of 8 x 3) and gloo all-reduces 4 or 3 partial gradients
# instead of 2, so the float32 sums round differently, and the difference
# carries through the weights into every later step. Measured on this job:
# at most 1.2e-6 relative over the 120 steps of a resized run (equal to the
# bit up to the first resize), and 0.9e-6 and 1.1e-6 for the whole job at
# 3 and at 4 ranks, so the drift does not grow with the steps spent at
# another size. The tolerance is 4 times that. The sample order is checked
# exactly, apart from the loss; what the loss adds is the optimizer's
# state across resizes (momentum, learning rate, gradient scaling).
LOSS_REL_TOL = 5e-6


def train_args(ckpt: Path, log: Path, *extra) -> list:
    return ["--ckpt", ckpt, "--steps", str(STEPS), "--dataset", str(DATASET),
            "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR), "--seed", "7",
            "--save-every", "1000", "--step-log", log, *extra]


def world_seen(log: Path, world: int, after_gen: int):
    """The generation after `after_gen` at `world` ranks once rank 0 logged a
    step of it, else None. Rank 0 exists in every generation."""
    for entry in step_log.by_rank(log).get(0, []):
        if entry["gen"] > after_gen and entry["world"] == world:
            return entry["gen"]
    return None


def wait_world(job: Job, log: Path, world: int, after_gen: int = -1) -> int:
    return wait_for(lambda: world_seen(log, world, after_gen),
                    f"a step at world size {world} after generation {after_gen}",
                    timeout=GEN_TIMEOUT_S, proc=job.agents[1],
                    others=tuple(a for n, a in sorted(job.agents.items()) if n != 1))


def global_order(ranks: list[dict]) -> list[int]:
    """The step's samples in global order: rank r takes the slice after the
    lower ranks' (docs/sdk-python.md)."""
    return [i for e in ranks for i in e["indices"]]


def generations(logged: dict[int, list[dict]]) -> list[tuple[int, int, int]]:
    """(generation, world size, last step) of each generation, in step order."""
    out: list[tuple[int, int, int]] = []
    for step, ranks in sorted(logged.items()):
        gen, world = ranks[0]["gen"], ranks[0]["world"]
        if out and out[-1][0] == gen:
            out[-1] = (gen, world, step)
        else:
            out.append((gen, world, step))
    return out


def check_run(logged: dict[int, list[dict]], steps: int = STEPS, dataset: int = DATASET,
              global_batch: int = GLOBAL_BATCH) -> None:
    """Steps 1..steps each ran once, by every rank of one generation (ranks
    0..W-1, W the world size), each with the same loss; the global batch is
    constant; within an epoch no sample is seen twice, and every epoch that
    ended saw each sample once. (test_train_fsdp.py's run too.)"""
    assert sorted(logged) == list(range(1, steps + 1))
    epochs: dict[int, list[int]] = defaultdict(list)
    for step, ranks in sorted(logged.items()):
        world = ranks[0]["world"]
        assert len({e["gen"] for e in ranks}) == 1, (step, ranks)
        assert [e["rank"] for e in ranks] == list(range(world)), (step, ranks)
        assert {e["world"] for e in ranks} == {world}, (step, ranks)
        assert len({e["loss"] for e in ranks}) == 1, (step, ranks)
        assert {e["global_batch"] for e in ranks} == {global_batch}, (step, ranks)
        assert len(global_order(ranks)) == global_batch, (step, ranks)
        epochs[ranks[0]["epoch"]].extend(global_order(ranks))
    per_epoch = dataset // global_batch
    assert sorted(epochs) == list(range(math.ceil(steps / per_epoch)))
    for epoch, seen in epochs.items():
        assert len(set(seen)) == len(seen), f"epoch {epoch} repeats samples"
        if len(seen) == dataset or epoch < max(epochs):
            assert sorted(seen) == list(range(dataset)), f"epoch {epoch} missed samples"


def events_of(directory: Path) -> list[dict]:
    return [json.loads(line) for path in directory.glob("events.*.jsonl")
            for line in path.read_text().splitlines()]


def check_stopped_together(job: Job, logged: dict[int, list[dict]]) -> None:
    """Every rank of each generation but the last saved at one step for the
    resize and left, and every rank of the next one started from it."""
    events = events_of(job.dir)
    gens = generations(logged)
    for (gen, world, last), (nxt, _, _) in zip(gens, gens[1:]):
        saves = [e for e in events if e["ev"] == "save" and e["why"] == "resize" and e["gen"] == gen]
        assert sorted(e["rank"] for e in saves) == list(range(world)), (gen, saves)
        assert {e["step"] for e in saves} == {last}, (gen, last, saves)
        exits = [e for e in events if e["ev"] == "exit" and e["gen"] == gen]
        assert sorted(e["rank"] for e in exits) == list(range(world)), (gen, exits)
        assert {e["how"] for e in exits} == {"resize"}, (gen, exits)
        inits = [e for e in events if e["ev"] == "init" and e["gen"] == nxt]
        assert inits and {e["from_step"] for e in inits} == {last}, (nxt, last, inits)
    final = [e for e in events if e["ev"] == "exit" and e["gen"] == gens[-1][0]]
    assert sorted(e["rank"] for e in final) == list(range(gens[-1][1])), final
    assert {e["how"] for e in final} == {"done"}, final


def fixed_run(shared_runs, torchrun):  # noqa: F811
    """The job at 2 ranks from start to end under torchrun (no job config,
    no scale event), made once for the module."""

    def make(procs, marker, directory):
        env = launcher_env(marker, directory / "tmp", OMP_NUM_THREADS="1",
                           PYTHONPATH=str(PYTHON_SDK))
        proc = procs.spawn([torchrun, "--standalone", "--nproc-per-node", "2", TRAIN,
                            *train_args(directory / "ckpt", directory / "log")],
                           "torchrun-fixed", env=env)
        assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
        assert f"[train] done: {STEPS} steps" in proc.stdout(), proc.describe()
        assert "override" not in proc.stdout(), proc.describe()
        logged = step_log.by_step(directory / "log")
        check_run(logged)
        assert {e["world"] for ranks in logged.values() for e in ranks} == {2}
        return logged

    return shared_runs.get("fixed", make)


def elastic_job(procs, marker, elasticrun, tmp_path, store, *extra) -> Job:  # noqa: F811
    return Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
               worker=TRAIN, extra=list(extra),
               worker_args=train_args(tmp_path / "ckpt", tmp_path / "log", "--step-s", STEP_S,
                                      "--events", tmp_path / "events"))


def finish(job: Job, marker: str, expected: dict[int, int]) -> None:  # noqa: F811
    """Every agent exits as expected once the job ends, and nothing of the
    job is left: no agent, worker or death watch."""
    for n, code in expected.items():
        got = job.agents[n].wait(GEN_TIMEOUT_S)
        assert got == code, f"agent{n} exited {got}, expected {code}\n{job.agents[n].describe()}"
    left = wait_marked_gone(marker)
    assert not left, "processes of the job left behind:\n  " + "\n  ".join(left)


def two_four_three(job: Job, log: Path) -> int:
    """Resizes a job of nodes 1 and 2 to 4 nodes (3 and 4 join at once) and
    to 3 (node 4 leaves on SIGTERM), waiting for a step at each size;
    returns the generation at 3. (test_train_fsdp.py's resizes too.)"""
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    job.start_agent(3)
    job.start_agent(4)
    g4 = wait_world(job, log, 4, after_gen=g2)
    # A graceful leave: SIGTERM is a spot notice, the node's worker stops
    # with the others at the agreed step.
    job.agents[4].popen.send_signal(signal.SIGTERM)
    assert job.agents[4].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, job.agents[4].describe()
    return wait_world(job, log, 3, after_gen=g4)


def two_four_three_two(procs, elasticctl, job: Job, log: Path, store: int,  # noqa: F811
                       run_id: str) -> None:
    """two_four_three, then to 2 (an operator releases one), waiting for a
    step at each size."""
    g3 = two_four_three(job, log)
    # An operator's release: the highest group rank gives its place back and
    # waits as a spare until the job ends.
    ctl = procs.run([elasticctl, "release", "--nodes", "1", "--rdzv-endpoint",
                     f"127.0.0.1:{store}", "--rdzv-id", run_id], "elasticctl-release",
                    timeout=GEN_TIMEOUT_S)
    assert ctl.popen.returncode == 0, ctl.describe()
    wait_world(job, log, 2, after_gen=g3)


def test_the_python_example_resized_from_two_to_four_to_three_to_two_trains_as_the_fixed_run(
        procs, marker, elasticrun, elasticctl, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    # A scaling timeout of 3 s: both new agents wait before the job grows,
    # so it grows once, onto both.
    job = elastic_job(procs, marker, elasticrun, tmp_path, store, "--scaling-timeout", "3")
    two_four_three_two(procs, elasticctl, job, log, store, RUN_ID)
    finish(job, marker, {1: 0, 2: 0, 3: 0})

    got = step_log.by_step(log)
    check_run(got)
    assert [world for _, world, _ in generations(got)] == [2, 4, 3, 2], generations(got)
    check_stopped_together(job, got)
    worst = 0.0
    for step in range(1, STEPS + 1):
        # The same samples in the same global order at every step.
        assert global_order(got[step]) == global_order(want[step]), step
        mine, theirs = got[step][0]["loss"], want[step][0]["loss"]
        worst = max(worst, abs(mine - theirs) / abs(theirs))
        assert math.isclose(mine, theirs, rel_tol=LOSS_REL_TOL), (step, mine, theirs)
    print(f"largest relative loss difference: {worst:.3g}")


def test_a_world_size_override_sets_the_learning_rate_and_micro_batch_at_that_size_only(
        procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    config = tmp_path / "job.yaml"
    # Keyed by nodes; one worker per node here, so 3 nodes are 3 ranks. 4 x 4
    # is 3 ranks' share of 48; without the override the plan is 8 x 2.
    config.write_text("worldSizeOverrides:\n  3: {learningRate: 0.2, microBatchSize: 4}\n")
    job = elastic_job(procs, marker, elasticrun, tmp_path, store, "--config", config)
    job.start_agent(1)
    job.start_agent(2)
    g2 = wait_world(job, log, 2)
    job.start_agent(3)
    g3 = wait_world(job, log, 3, after_gen=g2)
    job.agents[3].popen.send_signal(signal.SIGTERM)
    assert job.agents[3].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, job.agents[3].describe()
    wait_world(job, log, 2, after_gen=g3)
    finish(job, marker, {1: 0, 2: 0})

    got = step_log.by_step(log)
    check_run(got)
    assert [world for _, world, _ in generations(got)] == [2, 3, 2], generations(got)
    check_stopped_together(job, got)
    for step in range(1, STEPS + 1):
        world = got[step][0]["world"]
        # The schedule goes on where it was, at four times the base at 3
        # nodes and back at the base after.
        scale = 0.2 / LR if world == 3 else 1.0
        expected = want[step][0]["lr"] * scale
        assert {e["micro"] for e in got[step]} == {4 if world == 3 else 8}, (step, got[step])
        for e in got[step]:
            assert math.isclose(e["lr"], expected, rel_tol=1e-9), (step, e["lr"], expected)
    said = "\n".join(p.stdout() for p in job.agents.values())
    assert said.count("[train] override for 3 nodes: learningRate 0.2, microBatchSize 4") == 1, said
    assert "override for 2 nodes" not in said, said
