"""Real PyTorch gloo jobs under elasticrun: the workers' env:// rendezvous
finds the store the agent hosts, in a standalone job, in a static job of two
agents on 127.0.0.1, and again after a restart (each attempt after the
first gets a fresh store, so the restarted ranks never read the keys of the
attempt before; in a static job every node restarts when one fails).

Each rank all-reduces rank + 1 and writes the sum; the job passes when every
rank saw n(n+1)/2 and the launcher exits 0 with nothing left running.
"""

from __future__ import annotations

from pathlib import Path

from conftest import WORKERS
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
)

GLOO = WORKERS / "launcher_gloo_worker.py"


def sums(state: Path) -> dict[str, int]:
    return {p.name: int(p.read_text()) for p in state.glob("ok.*")}


def launch(procs, marker, elasticrun, flags, tmp_path, name, *worker_args):  # noqa: F811
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = launcher_env(marker, tmp_path / "tmp", OMP_NUM_THREADS="1")
    return procs.spawn([elasticrun, *flags, GLOO, "--dir", state, *worker_args], name, env=env), state


def test_four_standalone_workers_all_reduce_over_gloo(procs, marker, elasticrun, tmp_path):  # noqa: F811
    proc, state = launch(procs, marker, elasticrun, ["--standalone", "--nproc-per-node", "4"],
                         tmp_path, "elasticrun")
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert sums(state) == {f"ok.rank{r}.attempt0": 10 for r in range(4)}


def test_two_static_agents_of_two_workers_all_reduce_over_gloo(procs, marker, elasticrun, tmp_path):  # noqa: F811
    port = free_port()
    agents = [
        launch(procs, marker, elasticrun,
               ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(port)],
               tmp_path, f"elasticrun-node{node}")
        for node in (0, 1)
    ]
    for proc, _ in agents:
        assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert sums(agents[0][1]) == {f"ok.rank{r}.attempt0": 10 for r in range(4)}


def test_a_job_restarted_after_a_crash_rendezvouses_again_and_all_reduces(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    proc, state = launch(procs, marker, elasticrun,
                         ["--standalone", "--nproc-per-node", "4", "--max-restarts", "1"],
                         tmp_path, "elasticrun", "--crash-rank", "1", "--crash-attempt", "0")
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert "rank 1: crashing on attempt 0" in proc.stderr(), "attempt 0 did not crash as planned"
    assert sums(state) == {f"ok.rank{r}.attempt1": 10 for r in range(4)}


def launch_static_crashing(procs, marker, elasticrun, tmp_path, attempts):  # noqa: F811
    """Two static agents of two workers with one restart; rank 3 (node 1)
    crashes on each of `attempts`."""
    port = free_port()
    crash = ["--crash-rank", "3"]
    for a in attempts:
        crash += ["--crash-attempt", str(a)]
    return [
        launch(procs, marker, elasticrun,
               ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(port), "--max-restarts", "1"],
               tmp_path, f"elasticrun-node{node}", *crash)
        for node in (0, 1)
    ]


def test_a_static_job_restarts_every_node_after_a_crash_on_one_and_all_reduces(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    # torchrun (PyTorch 2.15) restarts only the failed node, on the store of
    # the attempt before: its restarted workers read stale gloo addresses and
    # fail. Here both nodes restart, on a fresh store.
    agents = launch_static_crashing(procs, marker, elasticrun, tmp_path, attempts=[0])
    for proc, _ in agents:
        assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert "rank 3: crashing on attempt 0" in agents[1][0].stderr()
    assert "restart requested: node rank 1: local rank 1 exitcode 1" in agents[0][0].stderr()
    assert sums(agents[0][1]) == {f"ok.rank{r}.attempt1": 10 for r in range(4)}


def test_a_static_job_without_restarts_left_fails_on_every_node(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    agents = launch_static_crashing(procs, marker, elasticrun, tmp_path, attempts=[0, 1])
    for proc, _ in agents:
        assert proc.wait(RUN_TIMEOUT_S) == 1, proc.describe()
    # Node 0's workers are stopped by node 1's request, unless gloo made them
    # fail first: either way node 0 says why it gave up.
    assert ("no restart is left" in agents[0][0].stderr()
            or "Root Cause" in agents[0][0].stderr()), agents[0][0].describe()
    assert "Root Cause" in agents[1][0].stderr()
    assert not sums(agents[0][1])
