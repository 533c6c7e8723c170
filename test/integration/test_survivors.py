"""Survivors never hang on a dead or stuck peer (docs/health.md).

Two real agents, one gloo worker each (workers/survivor_worker.py, on the
SDK), all-reduce every step. In the first round rank 1 misbehaves: it is
SIGSTOPped, or never enters the step's all_reduce. Its agent's hang monitor
finds it and ends the round; the other agent publishes the failure in its
control block, and the SDK's release thread there makes the all_reduce that
rank 0 is blocked in raise, at once, instead of after gloo's 30 minutes.
The job restarts and finishes; nothing is left running.

The cut link (a peer that is alive but unreachable) is in test_elastic_netns.py.
"""

from __future__ import annotations

import json

import pytest

from conftest import WORKERS, elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    marker,  # noqa: F401 (fixture)
    wait_marked_gone,
)

WORKER = WORKERS / "survivor_worker.py"
# Room for a worker that is slow to exit after its last step on a loaded
# machine (a hang limit of 2 s once took that for a hang).
HANG_S = 4
# From the fault to the release: the fault's stack grace, the end record's
# round trip, the SDK's poll. Far below gloo's 30 minutes, and generous for
# a loaded 2-core machine.
RELEASE_BOUND_S = 20


@pytest.mark.parametrize("mode", ["stop", "absent"])
def test_a_survivor_blocked_in_an_all_reduce_with_a_stuck_peer_is_released(
        procs, marker, elasticrun, tmp_path, store, mode):  # noqa: F811
    events = tmp_path / "events"
    job = Job(procs, marker, elasticrun, tmp_path, "2:2", f"127.0.0.1:{store}",
              worker=WORKER, worker_args=[events, "--mode", mode, "--at", "20", "--steps", "60"],
              extra=["--hang-timeout", str(HANG_S), "--max-restarts", "1"])
    job.start_agent(1)
    job.start_agent(2)
    for n in (1, 2):
        assert job.agents[n].wait(GEN_TIMEOUT_S * 2) == 0, job.agents[n].describe()
    left = wait_marked_gone(marker)
    assert not left, "processes of the job left behind:\n  " + "\n  ".join(left)

    recs = [json.loads(line) for line in (events / "events.jsonl").read_text().splitlines()]
    [bad] = [r for r in recs if r["event"] == "misbehave"]
    assert bad["gen"] == 1 and bad["rank"] == 1
    # Rank 0 was released from the all_reduce it was blocked in, with gloo's
    # error, soon after the hang limit passed.
    [released] = [r for r in recs if r["event"] == "released" and r["rank"] == 0]
    assert released["gen"] == 1 and released["step"] == 20
    # gloo's read on the pair to the stopped peer fails: "closed" when the
    # peer's socket sent FIN, "reset" when it still held unread data (RST).
    assert any(w in released["error"] for w in ("closed", "reset")), released
    assert HANG_S <= released["t"] - bad["t"] < HANG_S + RELEASE_BOUND_S, (released, bad)
    # The next round trained to the end on both ranks.
    finished = {r["rank"] for r in recs if r["event"] == "finish" and r["gen"] > 1}
    assert finished == {0, 1}
    # Every rank stopped at the same step, so the hang monitor of either node
    # may be first; each one that fired says where its rank was: the stuck
    # rank in the loop (or stopped: then only py-spy can read it), the
    # survivor in the all_reduce.
    faults = [json.loads(p.read_text())
              for p in (tmp_path / "tmp").glob("torchelastic_*/*/attempt_0/fault.json")]
    assert faults and all(f["kind"] == "hang" for f in faults), faults
    for f in faults:
        [stack] = [s for s in f["stacks"] if s["local_rank"] == 0]
        if f["rank"] == 1 and mode == "stop":
            assert stack["stopped"] and stack["how"] == "py-spy", stack
        else:
            assert stack["how"] == "faulthandler", stack
        text = open(stack["file"]).read()
        assert ("all_reduce" in text) == (f["rank"] == 0), text
