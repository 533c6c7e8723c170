"""Elastic membership with real agents and real gloo workers.

Agents run on 127.0.0.x addresses of this machine (--local-addr), one worker
each, around a rendezvous store (`elasticctl store`, or hosted by the agent
whose address matches the endpoint). The workers (workers/elastic_worker.py)
all-reduce every step and log each generation they run in; the tests play
membership changes (a new agent, SIGTERM, kill -9 of a follower or of the
leader, too few agents) and then check, for every generation:

- the ranks are 0..W-1 without gaps and every worker saw the same WORLD_SIZE;
- the collectives were right (no "mismatch" record) and reached 5 steps;
- the job ends with every agent's exit status as expected and no process left.

Windows are shortened through flags (heartbeats of 0.2 s, a scaling timeout of
1 s, no stable period); timeouts only bound hangs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import WORKERS, Proc
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
)
from conftest import elasticctl  # noqa: F401 (fixture)

WORKER = WORKERS / "elastic_worker.py"
# A generation needs every worker to import torch and join gloo: seconds each
# on a loaded 2-core machine.
GEN_TIMEOUT_S = 120

FAST = [
    "--rdzv-conf", "heartbeat_interval=0.2,missed_heartbeats=5,last_call_timeout=0.5,join_timeout=60",
    "--scaling-timeout", "1",
    "--min-stable-period", "0",
    "--graceful-shutdown-timeout", "10",
]


class Job:
    def __init__(self, procs, marker, elasticrun, tmp_path, nnodes: str, port: int,  # noqa: F811
                 extra: list[str] | None = None):
        self.procs, self.marker, self.elasticrun = procs, marker, elasticrun
        self.tmp_path, self.nnodes, self.port = tmp_path, nnodes, port
        self.extra = extra or []
        self.dir = tmp_path / "events"
        self.dir.mkdir()
        self.agents: dict[int, Proc] = {}

    def start_agent(self, n: int, *flags: str) -> Proc:
        env = launcher_env(self.marker, self.tmp_path / "tmp", OMP_NUM_THREADS="1")
        args = [self.elasticrun, "--nnodes", self.nnodes, "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.port}",
                "--rdzv-id", "elastic-test", "--local-addr", f"127.0.0.{n}",
                *FAST, *self.extra, *flags, WORKER, "--dir", self.dir]
        proc = self.procs.spawn(args, f"agent{n}", env=env)
        self.agents[n] = proc
        return proc

    def events(self) -> list[dict]:
        path = self.dir / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def by_gen(self, event: str) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = defaultdict(list)
        for e in self.events():
            if e["event"] == event:
                out[e["gen"]].append(e)
        return out

    def wait_steady(self, world: int, after_gen: int = 0) -> int:
        """Waits for a generation after `after_gen` in which `world` workers
        reached the steady step; returns it."""

        def found():
            for gen, recs in sorted(self.by_gen("steady").items()):
                if gen > after_gen and len(recs) == world and recs[0]["world"] == world:
                    return gen
            return None

        return wait_for(found, f"a generation of {world} steady workers after {after_gen}",
                        timeout=GEN_TIMEOUT_S)

    def agent_of(self, gen: int, group_rank: int) -> int:
        """The test's agent number running group rank `group_rank` in `gen`."""
        for e in self.by_gen("start")[gen]:
            if e["group_rank"] == group_rank:
                for n, p in self.agents.items():
                    if p.pid == e["agent"]:
                        return n
        pytest.fail(f"no agent ran group rank {group_rank} in generation {gen}")

    def finish(self, expected: dict[int, int]) -> None:
        (self.dir / "finish").write_text("1")
        for n, code in expected.items():
            got = self.agents[n].wait(GEN_TIMEOUT_S)
            assert got == code, f"agent{n} exited {got}, expected {code}\n{self.agents[n].describe()}"

    def check_generations(self) -> None:
        assert not [e for e in self.events() if e["event"] == "mismatch"], self.events()
        for gen, starts in self.by_gen("start").items():
            worlds = {e["world"] for e in starts}
            assert len(worlds) == 1, f"generation {gen}: different WORLD_SIZE {worlds}"
            ranks = sorted(e["rank"] for e in starts)
            world = worlds.pop()
            # A generation may have been cut short before every rank started
            # (a later event ended it), but no rank is ever duplicated or out
            # of range, and a generation that reached the steady step had all.
            assert len(set(ranks)) == len(ranks) and all(0 <= r < world for r in ranks), (gen, ranks)
        for gen, steady in self.by_gen("steady").items():
            assert sorted(e["rank"] for e in steady) == list(range(steady[0]["world"])), (gen, steady)


@pytest.fixture
def store(procs, elasticctl):  # noqa: F811
    proc = procs.spawn([elasticctl, "store", "--host", "127.0.0.1", "--port", "0"], "store")
    host, port = proc.wait_for_listen_line()
    yield port
    proc.popen.send_signal(signal.SIGTERM)
    proc.wait(30)


def test_a_job_of_two_nodes_grows_to_three_when_a_third_agent_starts(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    # The agent at the endpoint's address hosts the store (no elasticctl).
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", free_port())
    job.start_agent(1)
    job.start_agent(2)
    g2 = job.wait_steady(2)
    job.start_agent(3)
    g3 = job.wait_steady(3, after_gen=g2)
    assert g3 > g2
    job.finish({1: 0, 2: 0, 3: 0})
    job.check_generations()
    assert {e["world"] for e in job.by_gen("finish")[g3]} == {3}


def test_an_agent_that_gets_sigterm_leaves_and_the_others_continue_at_two(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", store)
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = job.wait_steady(3)
    job.agents[3].popen.send_signal(signal.SIGTERM)
    assert job.agents[3].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, job.agents[3].describe()
    g2 = job.wait_steady(2, after_gen=g3)
    assert g2 > g3
    job.finish({1: 0, 2: 0})
    job.check_generations()


@pytest.mark.parametrize("victim_rank", [1, 0], ids=["follower", "leader"])
def test_a_job_survives_kill_9_of_an_agent_and_shrinks_after_the_faulty_timeout(
        procs, marker, elasticrun, tmp_path, store, victim_rank):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", store,
              extra=["--faulty-scale-down-timeout", "2"])
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = job.wait_steady(3)
    victim = job.agent_of(g3, victim_rank)
    job.agents[victim].popen.send_signal(signal.SIGKILL)
    job.agents[victim].wait(30)
    g2 = job.wait_steady(2, after_gen=g3)
    survivors = {n: 0 for n in job.agents if n != victim}
    job.finish(survivors)
    job.check_generations()
    assert g2 > g3


def test_a_replacement_within_the_faulty_timeout_keeps_the_size(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", store,
              extra=["--faulty-scale-down-timeout", "60"])
    for n in (1, 2, 3):
        job.start_agent(n)
    g3 = job.wait_steady(3)
    victim = job.agent_of(g3, 1)
    job.agents[victim].popen.send_signal(signal.SIGKILL)
    job.agents[victim].wait(30)
    job.start_agent(4)
    g = job.wait_steady(3, after_gen=g3)
    # No generation of two ran between the loss and the replacement.
    assert not [gen for gen, recs in job.by_gen("start").items()
                if g3 < gen < g and recs[0]["world"] == 2]
    job.finish({n: 0 for n in job.agents if n != victim})
    job.check_generations()


def test_a_third_agent_waits_as_a_spare_when_the_sizes_are_two_and_four(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", store,
              extra=["--replica-discrete-values", "2,4"])
    for n in (1, 2):
        job.start_agent(n)
    g2 = job.wait_steady(2)
    job.start_agent(3)
    # The spare's agent is up and registered; it must not start a worker.
    wait_for(lambda: "waits as a spare" in job.agents[3].stderr(),
             "the third agent to wait as a spare", timeout=GEN_TIMEOUT_S)
    time.sleep(2)  # past the scaling timeout (1 s): 3 is not an allowed size, no growth
    assert max(job.by_gen("start")) == g2
    assert job.agents[3].pid not in {e["agent"] for e in job.events()}
    job.finish({1: 0, 2: 0, 3: 0})
    job.check_generations()
    assert "every worker succeeded" in job.agents[3].stderr(), job.agents[3].describe()


def test_too_few_agents_left_fail_the_job_after_the_join_timeout_with_a_clear_report(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", store,
              extra=["--faulty-scale-down-timeout", "1",
                     "--rdzv-conf", "heartbeat_interval=0.2,missed_heartbeats=5,join_timeout=3"])
    for n in (1, 2):
        job.start_agent(n)
    g2 = job.wait_steady(2)
    victim = job.agent_of(g2, 1)
    survivor = 3 - victim
    job.agents[victim].popen.send_signal(signal.SIGKILL)
    job.agents[victim].wait(30)
    code = job.agents[survivor].wait(GEN_TIMEOUT_S)
    err = job.agents[survivor].stderr()
    assert code == 1, job.agents[survivor].describe()
    assert "at least 2 needed" in err, err
    job.check_generations()
