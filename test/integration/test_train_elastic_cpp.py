"""examples/cpp/train_elastic.cpp, the libtorch twin of
examples/python/train_elastic.py, unchanged under torchrun and elasticrun:
it trains, checkpoints in the C++ format (docs/checkpoint-format.md) and
resumes at another world size with the same global batch, every sample of
the epoch used once, and the losses of a run that never stopped.

The example links libtorch, so it lives in the plain libtorch build;
scripts/test.sh builds it and exports $CPP_TRAIN_ELASTIC. Unset, these tests
skip, except under CI.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import step_log
from conftest import elasticctl, optional_binary  # noqa: F401 (fixture)
from elastic_job import FAST, GEN_TIMEOUT_S, RDZV_CONF, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
    wait_for,
)

GLOBAL_BATCH = 48


@pytest.fixture(scope="session")
def train_elastic() -> Path:
    return optional_binary("CPP_TRAIN_ELASTIC", "scripts/test.sh builds examples/cpp",
                           "the C++ training example")


def train(procs, marker, launcher: list, binary: Path, tmp_path: Path, name: str,
          ckpt: Path, log: Path, steps: int, stop_at: int | None = None):
    """Trains to `steps` (the learning-rate schedule's length), or stops at
    `stop_at` with a checkpoint."""
    env = launcher_env(marker, tmp_path / "tmp", OMP_NUM_THREADS="1")
    stop = ["--stop-at", str(stop_at)] if stop_at else []
    proc = procs.spawn([*launcher, "--no-python", binary, "--ckpt", ckpt, "--steps", str(steps),
                        "--save-every", "10", "--step-log", log, *stop], name, env=env)
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    end = f"stopped: {stop_at}" if stop_at else f"done: {steps}"
    assert f"[train] {end} steps" in proc.stdout(), proc.describe()
    return proc


def check_steps(logged: dict[int, list[dict]], steps: int, worlds: dict[int, int]) -> None:
    """Steps 1..steps each ran once at the world size `worlds` gives for it
    (a step's world size: the first step after each key), every rank with
    the same loss, the whole global batch split between them, and within an
    epoch no sample twice."""
    assert sorted(logged) == list(range(1, steps + 1))
    seen: dict[int, set[int]] = {}
    for step, ranks in sorted(logged.items()):
        world = worlds[max(k for k in worlds if k < step)]
        assert sorted(e["world"] for e in ranks) == [world] * world, (step, ranks)
        assert len({e["loss"] for e in ranks}) == 1, ranks
        indices = [i for e in ranks for i in e["indices"]]
        assert len(indices) == GLOBAL_BATCH and all(e["global_batch"] == GLOBAL_BATCH for e in ranks)
        epoch = seen.setdefault(ranks[0]["epoch"], set())
        assert not epoch & set(indices), f"step {step} repeats samples of its epoch"
        epoch |= set(indices)


def test_the_cpp_example_resumes_at_another_world_size_as_if_it_had_never_stopped(
    procs, marker, torchrun, train_elastic, tmp_path  # noqa: F811
):
    resized, straight = tmp_path / "resized", tmp_path / "straight"
    train(procs, marker, [torchrun, "--standalone", "--nproc-per-node", "2"], train_elastic,
          tmp_path, "torchrun-w2", resized / "ckpt", resized / "log", 30, stop_at=20)
    again = train(procs, marker, [torchrun, "--standalone", "--nproc-per-node", "1"],
                  train_elastic, tmp_path, "torchrun-w1", resized / "ckpt", resized / "log", 30)
    assert "world size 1, from step 20" in again.stdout(), again.describe()
    train(procs, marker, [torchrun, "--standalone", "--nproc-per-node", "1"], train_elastic,
          tmp_path, "torchrun-straight", straight / "ckpt", straight / "log", 30)

    got, want = step_log.by_step(resized / "log"), step_log.by_step(straight / "log")
    check_steps(got, 30, {0: 2, 20: 1})
    check_steps(want, 30, {0: 1})
    for step in range(1, 31):
        # The same samples in the same step as the run that never stopped,
        # and the same loss, up to the order of the float sums.
        mine = sorted(i for e in got[step] for i in e["indices"])
        assert mine == sorted(want[step][0]["indices"]), step
        assert math.isclose(got[step][0]["loss"], want[step][0]["loss"], rel_tol=1e-4), step
    assert (resized / "ckpt" / "latest").read_text() == "step_000000030\n"


def test_the_cpp_example_runs_unchanged_under_elasticrun(
    procs, marker, elasticrun, train_elastic, tmp_path  # noqa: F811
):
    train(procs, marker, [elasticrun, "--standalone", "--nproc-per-node", "2"], train_elastic,
          tmp_path, "elasticrun", tmp_path / "ckpt", tmp_path / "log", 12)
    logged = step_log.by_step(tmp_path / "log")
    assert sorted(logged) == list(range(1, 13)) and all(len(v) == 2 for v in logged.values())
    assert (tmp_path / "ckpt" / "latest").read_text() == "step_000000012\n"


def test_when_a_node_joins_the_cpp_example_stops_at_one_step_and_continues_on_three(
    procs, marker, elasticrun, train_elastic, tmp_path, store  # noqa: F811
):
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"
    env = launcher_env(marker, tmp_path / "tmp", OMP_NUM_THREADS="1")

    def agent(n: int):
        return procs.spawn([elasticrun, "--nnodes", "2:3", "--nproc-per-node", "1",
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{store}",
                            "--rdzv-id", "train-cpp", "--local-addr", f"127.0.0.{n}",
                            "--rdzv-conf", RDZV_CONF, *FAST, "--no-python", train_elastic,
                            "--ckpt", ckpt, "--steps", "150", "--save-every", "1000",
                            "--step-ms", "40", "--step-log", log], f"agent{n}", env=env)

    agents = [agent(1), agent(2)]
    wait_for(lambda: len(step_log.by_step(log)) >= 3, "three steps at world size 2",
             timeout=GEN_TIMEOUT_S, proc=agents[0])
    agents.append(agent(3))
    for proc in agents:
        assert proc.wait(GEN_TIMEOUT_S) == 0, proc.describe()

    logged = step_log.by_step(log)
    resized = min(s for s, ranks in logged.items() if ranks[0]["world"] == 3)
    # Rank 0 of the old generation (on agent 1 or 2) said why it stopped.
    assert any(f"stopped at step {resized - 1} for a resize" in p.stdout() for p in agents[:2]), \
        "\n".join(p.describe() for p in agents)
    check_steps(logged, 150, {0: 2, resized - 1: 3})
    assert len({e["gen"] for e in logged[resized - 1]} | {e["gen"] for e in logged[resized]}) == 2
