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

import os
import signal
import time

import pytest

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, SDK_WORKER, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

def test_a_job_of_two_nodes_grows_to_three_when_a_third_agent_starts(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    # The agent at the endpoint's address hosts the store (no elasticctl).
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{free_port()}")
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
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}")
    job.leave_from_three_to_two()
    job.finish({1: 0, 2: 0})
    job.check_generations()


@pytest.mark.parametrize("victim_rank", [1, 0], ids=["follower", "leader"])
def test_a_job_survives_kill_9_of_an_agent_and_shrinks_after_the_faulty_timeout(
        procs, marker, elasticrun, tmp_path, store, victim_rank):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}",
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
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}",
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
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}",
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
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}",
              extra=["--faulty-scale-down-timeout", "1"],
              rdzv_conf="heartbeat_interval=0.2,missed_heartbeats=5,join_timeout=3")
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


def test_sdk_workers_stop_at_one_agreed_step_and_the_next_generation_resumes_from_it(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", worker=SDK_WORKER)
    g2, g3 = job.grow_from_two_to_three()
    stop_step = job.stopped_together(g2, 2, g3, 3)
    for n in (1, 2):
        assert f"every worker stops at step {stop_step}" in job.agents[n].stderr()


def test_sdk_workers_of_a_node_that_gets_sigterm_stop_with_the_others_at_one_agreed_step(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    # SIGTERM to an agent is a spot notice: its workers are not killed at
    # once (which would break their peers' collectives and roll the job
    # back); every rank of the job, the leaving node's included, stops at
    # the agreed step and saves, and the two nodes left resume from there.
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", worker=SDK_WORKER)
    g3, g2 = job.leave_from_three_to_two()
    job.stopped_together(g3, 3, g2, 2)
    assert "this node leaves the job" in job.agents[3].stderr()
    job.finish({1: 0, 2: 0})
    job.check_generations()


def test_a_flapping_agent_meets_growing_stable_periods_instead_of_a_restart_storm(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    # A node that comes for a second and goes again, eight times. Without a
    # stable period each visit would cost two restarts of the whole job (grow,
    # then shrink). With --min-stable-period 2 the period doubles after each
    # scale-up that follows another closely, so most visits end while the
    # visitor still waits as a spare.
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}",
              extra=["--min-stable-period", "2", "--max-stable-period", "60",
                     "--scaling-timeout", "0.5"])
    job.start_agent(1)
    job.start_agent(2)
    g2 = job.wait_steady(2)
    for visit in range(8):
        n = 10 + visit
        proc = job.start_agent(n)
        time.sleep(1.0)
        proc.popen.send_signal(signal.SIGTERM)
        proc.wait(GEN_TIMEOUT_S)
        time.sleep(0.5)
    grown = {gen for gen, recs in job.by_gen("start").items() if gen > g2 and recs[0]["world"] == 3}
    assert len(grown) <= 3, f"the job grew {len(grown)} times for a flapping node: {sorted(grown)}"
    # The two steady nodes still train, and finish.
    last = max(job.by_gen("start"))
    job.wait_steady(2, after_gen=last - 1) if job.by_gen("start")[last][0]["world"] == 2 else None
    job.finish({1: 0, 2: 0})
    job.check_generations()


def test_a_node_signalled_while_its_workers_stop_for_another_leave_stops_with_them(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    # A preemption signals every node, and under SLURM every worker too, a
    # few milliseconds apart: the second node's SIGTERM comes while its
    # workers already stop at the step agreed for the first node's leave.
    # That is its leave as well: its worker, signalled directly, goes on to
    # the agreed step rather than get a second SIGTERM from its agent.
    job = Job(procs, marker, elasticrun, tmp_path, "1:2", f"127.0.0.1:{store}", worker=SDK_WORKER)
    job.start_agent(1)
    job.start_agent(2)
    g = job.wait_steady(2)
    first, second = 2, 1
    worker_of = {e["agent"]: e["pid"] for e in job.by_gen("start")[g]}

    def preempt(n: int) -> None:
        os.kill(worker_of[job.agents[n].pid], signal.SIGTERM)
        job.agents[n].popen.send_signal(signal.SIGTERM)

    preempt(first)
    wait_for(lambda: "stopping the workers: the round ended" in job.agents[second].stderr(),
             "the other node to stop its workers for the leave", timeout=GEN_TIMEOUT_S)
    preempt(second)
    for n in (1, 2):
        assert job.agents[n].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, job.agents[n].describe()
    stops = job.by_gen("stop")[g]
    assert len(stops) == 2 and len({e["step"] for e in stops}) == 1, job.events()
    assert "this node leaves the job" in job.agents[second].stderr()
    assert "forwarding it" not in job.agents[second].stderr(), job.agents[second].describe()
