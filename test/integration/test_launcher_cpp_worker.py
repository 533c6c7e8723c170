"""A C++ worker compiled against libtorch (examples/cpp/allreduce_worker.cpp)
under elasticrun --no-python and, unchanged, under PyPI's torchrun: it finds
the store the way torch.distributed's env:// init does, builds a
ProcessGroupGloo on it and all-reduces rank + 1; each rank prints
"rank R/W allreduce=X ok" only when X is W(W+1)/2.

The worker is built without sanitizers (libtorch is not instrumented) in its
own build; scripts/test.sh builds it and exports $CPP_ALLREDUCE_WORKER. Unset,
these tests skip, except under CI, where a missing worker is a broken build.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import optional_binary
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
)

OK_LINE = re.compile(r"^rank (\d+)/(\d+) allreduce=(\d+) ok$", re.MULTILINE)


@pytest.fixture(scope="session")
def cpp_worker() -> Path:
    return optional_binary("CPP_ALLREDUCE_WORKER", "scripts/test.sh builds examples/cpp",
                           "the C++ worker")


def ok_ranks(output: str, world_size: int) -> list[int]:
    """Ranks that printed their ok line, each checked to have seen the whole world."""
    ranks = []
    for rank, world, total in OK_LINE.findall(output):
        assert int(world) == world_size, f"rank {rank} saw world size {world}, not {world_size}"
        assert int(total) == world_size * (world_size + 1) // 2, f"rank {rank} summed {total}"
        ranks.append(int(rank))
    return sorted(ranks)


def test_two_static_agents_of_two_cpp_workers_all_reduce_over_gloo(
    procs, marker, elasticrun, cpp_worker, tmp_path  # noqa: F811
):
    port = free_port()
    env = launcher_env(marker, tmp_path / "tmp", OMP_NUM_THREADS="1")
    agents = [
        procs.spawn(
            [elasticrun, "--nnodes", "2", "--node-rank", node, "--nproc-per-node", "2",
             "--master-addr", "127.0.0.1", "--master-port", port, "--no-python", cpp_worker],
            f"elasticrun-node{node}", env=env)
        for node in (0, 1)
    ]
    for proc in agents:
        assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    # Static ranks: node 0 runs ranks 0 and 1, node 1 ranks 2 and 3; each
    # agent's workers write to the agent's stdout.
    assert ok_ranks(agents[0].stdout(), 4) == [0, 1], agents[0].describe()
    assert ok_ranks(agents[1].stdout(), 4) == [2, 3], agents[1].describe()


def test_the_same_cpp_worker_runs_unchanged_under_torchrun(
    procs, marker, torchrun, cpp_worker, tmp_path  # noqa: F811
):
    env = launcher_env(marker, tmp_path / "tmp", OMP_NUM_THREADS="1")
    proc = procs.spawn(
        [torchrun, "--standalone", "--nproc-per-node", "2", "--no-python", cpp_worker],
        "torchrun", env=env)
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert ok_ranks(proc.stdout(), 2) == [0, 1], proc.describe()


def test_without_a_launcher_rank_0_of_the_cpp_worker_hosts_the_store(
    procs, marker, cpp_worker, tmp_path  # noqa: F811
):
    # No agent store: the worker falls back to env://'s own scheme, rank 0
    # serving the store at MASTER_ADDR:MASTER_PORT.
    port = str(free_port())
    ranks = [
        procs.spawn([cpp_worker], f"rank{rank}", env=launcher_env(
            marker, tmp_path / "tmp", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
        for rank in (0, 1)
    ]
    for proc in ranks:
        assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert [ok_ranks(p.stdout(), 2) for p in ranks] == [[0], [1]]
