"""Real PyTorch gloo jobs under elasticrun: the workers' env:// rendezvous
finds the store the agent hosts, in a standalone job, in a static job of two
agents on 127.0.0.1, and again after a restart (each standalone attempt gets
a fresh store, so the restarted ranks never read the keys of the attempt
before).

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
