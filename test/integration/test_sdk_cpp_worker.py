"""The C++ worker SDK (include/elasticrun/worker.hpp) under real elasticrun
agents: C++ workers (test/tools/sdk_elastic_worker.cpp, run with
--no-python) see a scale event in their control block and every rank stops
at the same agreed step; the next generation resumes from it.

Binaries: $SDK_ELASTIC_WORKER and $ELASTICRUN (CTest sets them); by hand
they default to build/dev/test/sdk_elastic_worker and build/dev/elasticrun.
Timeouts only bound hangs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import _binary, elasticctl  # noqa: F401 (fixture)
from elastic_job import Job, store  # noqa: F401 (fixture)
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
