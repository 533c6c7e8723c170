"""The rendezvous on etcd (--rdzv-backend etcd, etcd-v2; docs/protocol.md,
"etcd"), against a real three-member etcd cluster on loopback.

Three agents on 127.0.0.1-3 with one gloo worker each and every member's
endpoint: no agent hosts a store. etcd's leader is SIGKILLed mid-job: the
job's round goes on (its members elect another leader, the agents'
connections move to the members that live). Then `elasticctl release`
asks, through etcd, for one node back: the leader shrinks the job to two
on the two members left, the released node waits as a spare, and
`elasticctl status` reads all of it from etcd. An agent given no etcd that
answers stops with an error naming each endpoint.
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import Job
from etcd_cluster import EtcdCluster
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
)

# The suite's short windows, with heartbeats missed for 5 s before a
# member counts as lost: an etcd election (1 s timeout) and the agents'
# move to another member take a second or two, more on a loaded machine.
RDZV_CONF = "heartbeat_interval=0.2,missed_heartbeats=25,last_call_timeout=0.5,join_timeout=60"


@pytest.fixture
def etcd(procs, tmp_path):
    cluster = EtcdCluster(procs, tmp_path)
    yield cluster
    cluster.stop()


def test_a_job_on_etcd_goes_on_through_the_loss_of_etcds_leader_and_obeys_an_operators_release(
        procs, marker, elasticrun, elasticctl, etcd, tmp_path):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", etcd.endpoints, backend="etcd",
              rdzv_conf=RDZV_CONF)
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = job.wait_steady(3)
    assert not any("hosting the rendezvous store" in a.stderr() for a in job.agents.values())

    leader = etcd.leader()
    etcd.kill(leader)
    # Past the heartbeats' stall limit: had the loss stopped beats for that
    # long, the leader would have ended the round by now.
    time.sleep(6)
    assert max(job.by_gen("start")) == g3, "the loss of an etcd member ended the round"
    assert all(a.popen.poll() is None for a in job.agents.values())

    live = ",".join(m.endpoint for m in etcd.members if m is not leader)
    ctl = [elasticctl, "--rdzv-backend", "etcd", "--rdzv-endpoint", live, "--rdzv-id", job.run_id]
    release = procs.run([ctl[0], "release", *ctl[1:], "--nodes", "1", "--timeout", "60"],
                        "release", timeout=90)
    assert release.popen.returncode == 0, release.describe()
    g2 = job.wait_steady(2, after_gen=g3)
    spare = ({1, 2, 3} - job.agents_in(g2)).pop()
    assert job.agents[spare].popen.poll() is None, "the released node should wait as a spare"

    status = procs.run([ctl[0], "status", *ctl[1:], "--json"], "status", timeout=60)
    assert status.popen.returncode == 0, status.describe()
    s = json.loads(status.stdout())
    assert len(s["members"]) == 2 and s["requests"] == {"submitted": 1, "handled": 1}, s

    job.finish({1: 0, 2: 0, 3: 0})
    job.check_generations()


def test_an_agent_whose_etcd_nobody_serves_stops_with_an_error_naming_each_endpoint(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    dead = [free_port(), free_port()]
    endpoints = ",".join(f"127.0.0.1:{p}" for p in dead)
    env = launcher_env(marker, tmp_path / "tmp")
    agent = procs.run([elasticrun, "--nnodes", "1:2", "--nproc-per-node", "1",
                       "--rdzv-backend", "etcd-v2", "--rdzv-endpoint", endpoints,
                       "--rdzv-id", "nobody", "--rdzv-conf", "read_timeout=3,join_timeout=5",
                       "--no-python", "/bin/true"], "agent", timeout=60, env=env)
    assert agent.popen.returncode == 1, agent.describe()
    err = agent.stderr()
    assert "etcd" in err and all(str(p) in err for p in dead), err
