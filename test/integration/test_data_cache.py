"""The node's dataset cache (docs/memory-tier.md, "Dataset cache") under a
real agent: what a worker decoded once is mapped, not made again, by the
worker that replaces it; the cache goes with the agent, and with a killed
agent through its death watch."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from conftest import WORKERS
from elastic_job import PYTHON_SDK
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
    wait_marked_gone,
)

WORKER = WORKERS / "data_cache_worker.py"


def runs(out: Path) -> list[dict]:
    path = out / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start(procs, marker, elasticrun, tmp_path, *args):  # noqa: F811
    out = tmp_path / "out"
    out.mkdir()
    env = launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(PYTHON_SDK))
    proc = procs.spawn([elasticrun, "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
                        WORKER, out, *args], "agent", env=env)
    return proc, out


def test_a_restarted_worker_maps_what_the_killed_one_decoded(procs, marker, elasticrun,
                                                             tmp_path):  # noqa: F811
    proc, out = start(procs, marker, elasticrun, tmp_path)
    assert proc.wait(60) == 0, proc.describe()
    first, second = runs(out)
    assert first["made"] and not second["made"], (first, second)
    assert first["pid"] != second["pid"]
    assert second["mapped"] and second["sum"] == first["sum"] == sum(range(1000))
    assert first["dir"] == second["dir"] and first["dir"].startswith("/dev/shm/elasticrun-data-")
    assert not Path(first["dir"]).exists()  # the agent removed it as it ended


def test_a_killed_agents_death_watch_removes_the_cache(procs, marker, elasticrun,
                                                       tmp_path):  # noqa: F811
    proc, out = start(procs, marker, elasticrun, tmp_path, "--hold")
    [run] = wait_for(lambda: runs(out), "the shard cached", timeout=60, proc=proc)
    assert Path(run["dir"], "train-0", "tokens.npy").exists()
    proc.popen.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    assert not wait_marked_gone(marker)
    wait_for(lambda: not Path(run["dir"]).exists(), "the cache removed", timeout=10)
