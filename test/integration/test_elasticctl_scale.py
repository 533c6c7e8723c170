"""`elasticctl scale`, `release` and `status` against real agents.

Agents run on 127.0.0.x addresses of this machine (--local-addr), one gloo
worker each (workers/elastic_worker.py), around `elasticctl store`, as in
test_elastic_membership.py (elastic_job.Job).
An operator request is written to the store; the leader of the running
round acts on it within a heartbeat interval (0.2 s here), and elasticctl
returns once the leader has. The tests check the generations the workers
ran in: their size, and which agent ran a worker in each.

Windows are shortened through flags (heartbeats of 0.2 s, a scaling timeout
of 1 s, no stable period); timeouts only bound hangs.
"""

from __future__ import annotations

import json
import re
import signal
import struct

import pytest

from conftest import STOP_TIMEOUT_S, Proc, elasticctl, handshake  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

RUN_ID = "ctl-test"



def ctl(procs, elasticctl, *args, port: int, run_id: str = RUN_ID) -> Proc:  # noqa: F811
    """Runs one elasticctl job command to completion."""
    return procs.run([elasticctl, *args, "--rdzv-endpoint", f"127.0.0.1:{port}",
                      "--rdzv-id", run_id], f"elasticctl-{args[0]}", timeout=GEN_TIMEOUT_S)


def status(procs, elasticctl, port: int) -> dict:  # noqa: F811
    p = ctl(procs, elasticctl, "status", "--json", port=port)
    assert p.popen.returncode == 0, p.describe()
    return json.loads(p.stdout())


def raw_set(port: int, key: str, value: str) -> None:
    """SET of a raw key (no client prefix), as the agents' StoreClient writes it."""
    k, v = key.encode(), value.encode()
    with handshake("127.0.0.1", port) as sock:
        sock.sendall(struct.pack("<BQ", 1, len(k)) + k + struct.pack("<Q", len(v)) + v)
        # SET has no reply; a PING after it proves the store applied it.
        sock.sendall(struct.pack("<BI", 13, 7))
        assert sock.recv(4) == struct.pack("<I", 7)


def test_a_released_node_waits_as_a_spare_and_a_scale_request_readmits_it(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id=RUN_ID)
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = job.wait_steady(3)
    # The most recently added replica goes first: the highest group rank.
    released = job.agent_of(g3, 2)

    p = ctl(procs, elasticctl, "release", "--nodes", "1", port=store)
    assert p.popen.returncode == 0, p.describe()
    assert "handled" in p.stdout(), p.describe()
    g2 = job.wait_steady(2, after_gen=g3)
    assert released not in job.agents_in(g2)
    # Alive, and waiting in the open round as a released node, not as a member.
    def released_waits():
        s = status(procs, elasticctl, store)
        waits = any(a["host"] == f"127.0.0.{released}" and a["released"] for a in s["waiting"])
        return s if waits else None

    s = wait_for(released_waits, "the released agent to wait in the open round",
                 timeout=GEN_TIMEOUT_S)
    assert job.agents[released].popen.poll() is None, job.agents[released].describe()
    assert s["policy"]["size_limit"] == 2, s
    assert "gives its place back" in job.agents[released].stderr()

    p = ctl(procs, elasticctl, "scale", "--nodes", "3", port=store)
    assert p.popen.returncode == 0, p.describe()
    g3b = job.wait_steady(3, after_gen=g2)
    assert released in job.agents_in(g3b)
    # No worker ran on the released agent between the release and the scale-up.
    assert not [gen for gen in job.by_gen("start") if g3 < gen < g3b
                and released in job.agents_in(gen)]
    job.finish({1: 0, 2: 0, 3: 0})
    job.check_generations()


def test_a_release_of_more_nodes_than_the_minimum_allows_stops_at_the_minimum(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id=RUN_ID)
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = job.wait_steady(3)

    p = ctl(procs, elasticctl, "release", "--nodes", "5", port=store)
    assert p.popen.returncode == 0, p.describe()
    g2 = job.wait_steady(2, after_gen=g3)
    s = status(procs, elasticctl, store)
    assert s["state"] == "running" and s["round"] == g2, s
    assert s["nodes"] == 2 and s["world_size"] == 2, s
    assert s["policy"]["size_limit"] == 2, s
    assert s["requests"] == {"submitted": 1, "handled": 1}, s
    table = ctl(procs, elasticctl, "status", port=store)
    assert table.popen.returncode == 0, table.describe()
    assert re.search(rf"^round +{g2}: 2 nodes, world size 2$", table.stdout(), re.M), table.stdout()
    job.finish({1: 0, 2: 0, 3: 0})
    job.check_generations()


def test_status_reports_the_round_and_its_members_in_group_rank_order(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id=RUN_ID)
    for n in (1, 2):
        job.start_agent(n)
    g = job.wait_steady(2)

    s = status(procs, elasticctl, store)
    assert s["run_id"] == RUN_ID and s["endpoint"] == f"127.0.0.1:{store}", s
    assert s["state"] == "running" and s["round"] == g and s["open_round"] == g + 1, s
    assert s["world_size"] == 2, s
    assert [m["group_rank"] for m in s["members"]] == [0, 1], s
    assert [m["host"] for m in s["members"]] == [f"127.0.0.{job.agent_of(g, r)}" for r in (0, 1)], s
    assert [m["rank_offset"] for m in s["members"]] == [0, 1], s
    assert s["end"] is None and s["finished"] is None and s["restarts"] == 0, s

    job.finish({1: 0, 2: 0})
    s = status(procs, elasticctl, store)
    assert s["state"] == "finished" and s["finished"]["ok"], s
    assert s["end"]["kind"] == "done", s
    job.check_generations()


def test_a_request_no_leader_reads_times_out_and_stays_queued(procs, elasticctl, store):  # noqa: F811
    # A job whose first round never closed: no leader reads requests.
    raw_set(store, f"/elasticrun/{RUN_ID}/round", "1")
    p = ctl(procs, elasticctl, "scale", "--nodes", "2", "--timeout", "0.5", port=store)
    assert p.popen.returncode == 1, p.describe()
    assert "stays queued" in p.stderr(), p.describe()
    s = status(procs, elasticctl, store)
    assert s["state"] == "forming" and s["round"] is None, s
    assert s["requests"] == {"submitted": 1, "handled": 0}, s

    p = ctl(procs, elasticctl, "release", "--nodes", "1", "--no-wait", port=store)
    assert p.popen.returncode == 0, p.describe()
    assert status(procs, elasticctl, store)["requests"]["submitted"] == 2


@pytest.mark.parametrize("args", [["scale", "--nodes", "0"], ["release", "--nodes", "-1"],
                                  ["scale", "--nodes", "x"], ["scale"]],
                         ids=["scale-0", "release-negative", "not-a-number", "no-nodes"])
def test_a_request_without_a_valid_node_count_exits_2_with_the_usage(procs, elasticctl, args):  # noqa: F811
    p = ctl(procs, elasticctl, *args, port=free_port())
    assert p.popen.returncode == 2, p.describe()
    assert "--nodes" in p.stderr() and "Usage:" in p.stderr(), p.describe()


@pytest.mark.parametrize("command", [["status"], ["scale", "--nodes", "2"]], ids=["status", "scale"])
def test_an_unreachable_store_exits_1_naming_the_endpoint(procs, elasticctl, command):  # noqa: F811
    port = free_port()  # nothing listens there
    p = ctl(procs, elasticctl, *command, "--connect-timeout", "1", port=port)
    assert p.popen.returncode == 1, p.describe()
    assert f"cannot reach the store at 127.0.0.1:{port}" in p.stderr(), p.describe()
    assert len(p.stderr().strip().splitlines()) == 1, p.describe()


@pytest.mark.parametrize("command", [["status"], ["release", "--nodes", "1"]],
                         ids=["status", "release"])
def test_an_unknown_job_exits_1_and_says_so(procs, elasticctl, store, command):  # noqa: F811
    p = ctl(procs, elasticctl, *command, port=store, run_id="nope")
    assert p.popen.returncode == 1, p.describe()
    assert f"no job 'nope' on 127.0.0.1:{store}" in p.stderr(), p.describe()
