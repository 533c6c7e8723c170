"""The C++ worker SDK (include/elasticrun/worker.hpp) under real elasticrun
agents: C++ workers (test/tools/sdk_elastic_worker.cpp, run with
--no-python) see a scale event in their control block and every rank stops
at the same agreed step; the next generation resumes from it.

Binaries: $SDK_ELASTIC_WORKER and $ELASTICRUN (CTest sets them); by hand
they default to build/dev/test/sdk_elastic_worker and build/dev/elasticrun.
Timeouts only bound hangs.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from conftest import _binary, elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import elasticrun, marker  # noqa: F401 (fixture)


@pytest.fixture(scope="session")
def cpp_worker() -> Path:
    return _binary("SDK_ELASTIC_WORKER", "build/dev/test/sdk_elastic_worker")


def test_cpp_workers_stop_at_one_agreed_step_when_a_node_joins_and_resume_from_it(
        procs, marker, elasticrun, tmp_path, store, cpp_worker):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}",
              worker=cpp_worker, extra=["--no-python"])
    g2, g3 = job.grow_from_two_to_three()
    job.check_generations()

    stops = job.by_gen("stop")[g2]
    # Both ranks of the old generation stopped by themselves (exit 0, told by
    # SIGUSR1 and the control block), at the same step, and knew why.
    assert len(stops) == 2, job.events()
    assert len({e["step"] for e in stops}) == 1, stops
    assert all(e["signal"] for e in stops), stops
    assert all(e["event_kind"] == "scale_up" and e["reason"] for e in stops), stops
    assert all(e["lang"] == "c++" for e in job.events())
    stop_step = stops[0]["step"]
    starts = job.by_gen("start")[g3]
    assert len(starts) == 3 and {e["step"] for e in starts} == {stop_step}, starts
    for n in (1, 2):
        assert f"every worker stops at step {stop_step}" in job.agents[n].stderr()
    # The last generation finished together, past the step it resumed from.
    finishes = job.by_gen("finish")[g3]
    assert len(finishes) == 3 and len({e["step"] for e in finishes}) == 1, finishes
    assert finishes[0]["step"] > stop_step


def test_cpp_workers_under_inprocess_restart_park_and_go_on_in_their_processes_through_a_join_and_a_leave(  # noqa: E501
        procs, marker, elasticrun, tmp_path, store, cpp_worker):  # noqa: F811
    """elasticrun::sdk::inprocess: at each resize the ranks park instead of
    exiting, and the next round's environment reaches them in process; the
    joiner takes the highest step of the round's ranks from them."""
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}",
              worker=cpp_worker, extra=["--no-python", "--inprocess-restart"])
    job.start_agent(1)
    job.start_agent(2)
    g2 = job.wait_steady(2)
    job.start_agent(3)
    g3 = job.wait_steady(3, after_gen=g2)
    job.agents[3].popen.send_signal(signal.SIGTERM)
    assert job.agents[3].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, job.agents[3].describe()
    g2b = job.wait_steady(2, after_gen=g3)
    job.finish({1: 0, 2: 0})
    job.check_generations()

    # Nodes 1 and 2 ran one process each from start to end.
    pids = {n: {e["pid"] for e in job.events() if e["agent"] == job.agents[n].pid} for n in (1, 2)}
    assert all(len(p) == 1 for p in pids.values()), pids
    # Every resize parked every rank at one step (no checkpoint file), and
    # every rank of the next round, the joiner too, started from it.
    for old, new in ((g2, g3), (g3, g2b)):
        parks = job.by_gen("park")[old]
        assert len(parks) == parks[0]["world"] and len({e["step"] for e in parks}) == 1, parks
        assert {e["step"] for e in job.by_gen("start")[new]} == {parks[0]["step"]}
    assert not list(job.dir.glob("ckpt.*")) and not job.by_gen("stop")
    said = job.agents[1].stderr()
    assert "parked worker(s) go on in the new round" in said, said[-3000:]
