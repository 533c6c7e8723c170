"""The memory tier (docs/memory-tier.md), under real agents, with no
checkpoint directory anywhere. A whole state (DDP) and a sharded one
(FSDP2).

examples/python/train_elastic.py without --ckpt keeps its state only in
the nodes' memory tiers. A job of two nodes and a spare loses a whole node
(kill -9 of its agent: the death watch takes its workers): the survivor's
snapshot (its rescue of the last step, or a periodic one written in the
background) is in its agent's memory; the spare that replaces the lost
node fetches it from the survivor's agent before its workers start, and
the job trains on exactly as a run that never failed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

import step_log
from conftest import WORKERS
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    marker,  # noqa: F401 (fixture)
    shared_runs,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
    wait_for,
)
from test_rescue import trained_as
from test_train_elastic_python import (
    DATASET,
    GLOBAL_BATCH,
    LR,
    STEP_S,
    STEPS,
    TRAIN,
    events_of,
    finish,
    fixed_run,
    wait_world,
)

SHM = Path("/dev/shm")
FSDP_WORKER = WORKERS / "fsdp_memory_worker.py"


def tiers_of(job: Job) -> list[str]:
    """The memory tiers and control blocks of the job's agents still in
    /dev/shm; a killed agent's death watch removes both. Named by the
    agents' pids, and made since the job started: an earlier process of
    the same pid (another job on the machine, a killed agent of a build
    whose death watch did not remove its control block) left its own."""
    def ours(p: Path) -> bool:
        try:
            return p.stat().st_ctime >= job.created
        except FileNotFoundError:
            return False
    return [p.name for n, agent in job.agents.items()
            for pattern in (f"elasticrun-mem-{agent.pid}-*", f"elasticrun-{agent.pid}-*.ctl*")
            for p in SHM.glob(pattern) if ours(p)]


@pytest.mark.parametrize("kept", ["rescue", "periodic"])
def test_a_lost_node_is_replaced_from_a_peers_memory_and_trains_as_a_run_that_never_failed(
        kept, procs, marker, elasticrun, torchrun, tmp_path, store, shared_runs):  # noqa: F811
    want = fixed_run(shared_runs, torchrun)
    log = tmp_path / "log"
    # rescue: no periodic save, the survivor's rescue is all there is;
    # periodic: no rescue, a background save every 4 steps.
    how = ["--save-every", "1000"] if kept == "rescue" else ["--save-every", "4", "--no-rescue"]
    job = Job(procs, marker, elasticrun, tmp_path, "2:2", f"127.0.0.1:{store}",
              run_id=f"memory-{kept}", worker=TRAIN, extra=["--max-restarts", "3"],
              worker_args=["--steps", str(STEPS), "--dataset", str(DATASET),
                           "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR), "--seed", "7",
                           "--step-log", log, "--step-s", STEP_S, "--events", tmp_path / "events",
                           *how])
    job.start_agent(1)
    job.start_agent(2)
    g = wait_world(job, log, 2)
    job.start_agent(3, "--event-log", str(tmp_path / "agent3.jsonl"))  # a spare: the job is full
    wait_for(lambda: len(step_log.by_step(log)) >= 22 or None, "22 steps",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    job.agents[2].popen.send_signal(signal.SIGKILL)
    wait_world(job, log, 2, after_gen=g)
    finish(job, marker, {1: 0, 3: 0})

    events = events_of(job.dir)
    saves = [e for e in events if e["ev"] == "save" and e["gen"] == g]
    resumed = {e["from_step"] for e in events if e["ev"] == "init" and e["gen"] > g}
    if kept == "rescue":
        [rescue] = [e for e in saves if e["why"] == "rescue"]
        assert resumed == {rescue["step"]}, (resumed, rescue)
    else:
        assert saves and all(e["why"] == "periodic" and e["background"] for e in saves), saves
        begun = max(e["step"] for e in saves)
        # The newest snapshot begun before the kill, or the one before it
        # when the kill cut that one short.
        assert resumed in ({begun}, {begun - 4}), (resumed, begun)
    assert min(resumed) >= 16, resumed
    # The replacement had nothing: its agent fetched the survivor's snapshot.
    out = job.agents[3].stdout() + job.agents[3].stderr()
    assert "fetched 1 memory snapshot(s) of step" in out, job.agents[3].describe()
    [fetch] = [e for e in map(json.loads, (tmp_path / "agent3.jsonl").read_text().splitlines())
               if e["event"] == "memory_fetch"]
    assert fetch["snapshots"] == 1 and fetch["failed"] == 0 and fetch["bytes"] > 0, fetch
    assert fetch["step"] == min(resumed), (fetch, resumed)
    trained_as(log, want)
    # No directory anywhere: the state was only ever in memory.
    assert not (tmp_path / "ckpt").exists()
    # Every tier is gone: the agents that ended removed theirs, the killed
    # one's death watch removed its.
    assert not tiers_of(job), tiers_of(job)


def test_a_sharded_state_restores_from_the_nodes_memory_resharded_after_a_grow_and_a_failure(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    """FSDP2 over gloo, the state in the memory tiers only. Node 1 trains
    alone; node 2 joins: the resize's save is node 1's shards of world 1,
    which node 2's agent fetches, and both load them resharded at world 2.
    Then rank 1 dies: each node holds its own rank's shards of the last
    save, fetches the other's, and the restart loads them. Every load is
    bit for bit the state saved at its step."""
    events = tmp_path / "events"
    job = Job(procs, marker, elasticrun, tmp_path, "1:2", f"127.0.0.1:{store}",
              run_id="memory-fsdp", worker=FSDP_WORKER, extra=["--max-restarts", "3"],
              worker_args=[events, "--steps", "60", "--die-after", "10"])
    job.start_agent(1)
    wait_for(lambda: saves(events, world=1) or None, "a save at world 1", timeout=GEN_TIMEOUT_S,
             proc=job.agents[1])
    job.start_agent(2)
    finish(job, marker, {1: 0, 2: 0})

    recorded = [json.loads(line) for line in (events / "events.jsonl").read_text().splitlines()]
    saved = {}
    for e in recorded:
        if e["event"] == "saved":
            saved.setdefault(e["step"], set()).add((e["world"], e["digest"]))
    loads = [e for e in recorded if e["event"] == "loaded" and e["step"] > 0]
    # The grow (from world 1's save) and the restart after the kill (from
    # world 2's), at least.
    assert {e["world"] for e in loads} == {2}, loads
    assert {w for e in loads for w, _ in saved[e["step"]]} == {1, 2}, (loads, saved)
    for e in loads:
        assert e["digest"] in {d for _, d in saved[e["step"]]}, (e, saved.get(e["step"]))
    assert (events / "died").exists()
    out = job.agents[2].stdout() + job.agents[2].stderr()
    assert "memory snapshot(s) of step" in out, job.agents[2].describe()
    assert not tiers_of(job), tiers_of(job)


def saves(events: Path, world: int) -> list[dict]:
    path = events / "events.jsonl"
    if not path.exists():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines())
            if e["event"] == "saved" and e["world"] == world]


def replicated(tmp_path: Path, agents, world: int) -> dict[int, set[str]]:
    """step -> the sources (node ids) whose shards of that step, saved at
    `world` ranks, some agent of `agents` replicated (their event logs)."""
    out: dict[int, set[str]] = {}
    for n in agents:
        log = tmp_path / f"agent{n}.events.jsonl"
        if not log.exists():
            continue
        for line in log.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            if e.get("event") != "memory_replicate" or not e["snapshot"].endswith(f"of{world}"):
                continue
            out.setdefault(int(e["snapshot"][5:14]), set()).add(e["source"])
    return out


def all_replicated(job: Job, tmp_path: Path, agents, world: int) -> int:
    """Waits until every node's shards of a step at `world` are replicated;
    returns the newest such step."""
    def found():
        steps = [s for s, sources in replicated(tmp_path, agents, world).items()
                 if len(sources) == world]
        return max(steps) if steps else None
    return wait_for(found, f"every node's shards of a step at world {world} replicated",
                    timeout=2 * GEN_TIMEOUT_S, proc=job.agents[1])


def agent_events(log: Path, event: str) -> list[dict]:
    """The events of type `event` in an agent's --event-log."""
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == event]


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def loads(events: Path, world: int) -> list[dict]:
    """The worker's loads of a saved state (step > 0) at `world` ranks."""
    return [e for e in map(json.loads, (events / "events.jsonl").read_text().splitlines())
            if e["event"] == "loaded" and e["world"] == world and e["step"] > 0]


def test_a_sharded_state_survives_a_nodes_loss_from_its_replicas_and_the_loss_of_two_names_the_lost_shards(  # noqa: E501
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    """FSDP2 over gloo on four nodes, one rank each, the state in the memory
    tiers only, each node's shards replicated to the next node while the
    job trains (--memory-replicas 1). Once every node's shards of a step
    are replicated, kill -9 of a whole node: its shards are on no survivor
    but as a replica, and the job goes on at 3 ranks, resharded from the
    memory replicas, bit for bit the state saved at that step, and once a
    step at 3 ranks is replicated the shards of 4 ranks, the lost node's
    replicas among them, are freed. Then two of
    the three nodes are killed at once: one rank's shards were on those two
    only, so the survivor stops with an error that names them rather than
    train from step 0."""
    events = tmp_path / "events"
    job = Job(procs, marker, elasticrun, tmp_path, "1:4", f"127.0.0.1:{store}",
              run_id="memory-replicas", worker=FSDP_WORKER,
              extra=["--max-restarts", "1", "--faulty-scale-down-timeout", "1"],
              worker_args=[events, "--steps", "100000", "--save-every", "4"])
    for n in (1, 2, 3, 4):
        job.start_agent(n, "--memory-replicas", "1", "--event-log",
                        str(tmp_path / f"agent{n}.events.jsonl"))

    step4 = all_replicated(job, tmp_path, (1, 2, 3, 4), 4)
    job.agents[4].popen.send_signal(signal.SIGKILL)
    assert job.agents[4].wait(30) == -signal.SIGKILL

    wait_for(lambda: loads(events, 3) or None, "a load at world 3", timeout=2 * GEN_TIMEOUT_S,
             proc=job.agents[1])
    saved = {e["step"]: e["digest"] for e in saves(events, world=4)}
    load = loads(events, 3)[0]
    assert load["step"] >= step4, (load, step4)
    assert load["digest"] == saved[load["step"]], (load, saved)

    # Three nodes now; once their shards of a step are replicated, the lost
    # node's replicas (and every other shard of world 4) are freed.
    all_replicated(job, tmp_path, (1, 2, 3), 3)

    def world4_left():
        return [p.name for n in (1, 2, 3)
                for tier in SHM.glob(f"elasticrun-mem-{job.agents[n].pid}-*")
                for p in tier.iterdir() if p.name.endswith("of4")]
    wait_for(lambda: not world4_left(), "the shards of world 4 freed", timeout=30,
             proc=job.agents[1])
    job.agents[2].popen.send_signal(signal.SIGKILL)
    job.agents[3].popen.send_signal(signal.SIGKILL)
    finish(job, marker, {1: 1, 2: -signal.SIGKILL, 3: -signal.SIGKILL})
    out = job.agents[1].stdout() + job.agents[1].stderr()
    assert "cannot be restored from the memory tier" in out, job.agents[1].describe()
    assert "of the 3 that saved step" in out, job.agents[1].describe()
    assert not tiers_of(job), tiers_of(job)


def test_a_graceful_leave_hands_the_survivors_its_shards_of_the_agreed_step(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    """FSDP2 on three nodes, one rank each, the state in the memory tiers
    only and replicated (--memory-replicas 1). SIGTERM to node 3 (a spot
    notice): the job stops at an agreed step and every rank saves it, so
    node 3's shards of that step are in node 3's tier only. Its agent
    serves them until both survivors have fetched them, and the job goes
    on at two ranks from that very step, bit for bit, not from the older
    step that was replicated before the notice. Then both survivors get
    SIGTERM at once: nobody is left to restore, and they leave at once."""
    events = tmp_path / "events"
    job = Job(procs, marker, elasticrun, tmp_path, "1:3", f"127.0.0.1:{store}",
              run_id="memory-handoff", worker=FSDP_WORKER,
              worker_args=[events, "--steps", "100000", "--save-every", "4"])
    for n in (1, 2, 3):
        job.start_agent(n, "--memory-replicas", "1", "--event-log",
                        str(tmp_path / f"agent{n}.events.jsonl"))
    replicated_before = all_replicated(job, tmp_path, (1, 2, 3), 3)
    job.agents[3].popen.send_signal(signal.SIGTERM)
    assert job.agents[3].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, job.agents[3].describe()

    wait_for(lambda: loads(events, 2) or None, "a load at world 2", timeout=2 * GEN_TIMEOUT_S,
             proc=job.agents[1])
    agreed = [e for e in saves(events, world=3) if e["why"] == "resize"]
    assert len(agreed) == 1, agreed
    load = loads(events, 2)[0]
    assert load["step"] == agreed[0]["step"] > replicated_before, (load, agreed, replicated_before)
    assert load["digest"] == agreed[0]["digest"], (load, agreed)
    handoff = agent_events(tmp_path / "agent3.events.jsonl", "memory_handoff")
    assert [(e["outcome"], e["members"]) for e in handoff] == [("restored", 2)], handoff
    # Its own rank's shards of the agreed step (its group rank: the order
    # the agents arrived in).
    assert [re.sub(r"\.r\dof3$", ".rNof3", n) for n in handoff[0]["snapshots"]] == \
        [f"step_{agreed[0]['step']:09d}.rNof3"], handoff

    for n in (1, 2):
        job.agents[n].popen.send_signal(signal.SIGTERM)
    finish(job, marker, {1: 128 + signal.SIGTERM, 2: 128 + signal.SIGTERM})
    for n in (1, 2):
        outcomes = [e["outcome"] for e in
                    agent_events(tmp_path / f"agent{n}.events.jsonl", "memory_handoff")]
        assert outcomes == ["nobody_left"], (n, outcomes)
    assert not tiers_of(job), tiers_of(job)


def test_a_replica_changed_in_memory_is_not_loaded(procs, marker, elasticrun, tmp_path,
                                                    store):  # noqa: F811
    """FSDP2 on three nodes, --memory-replicas 1. Node 3's worker is
    stopped (SIGSTOP: the others block in its collectives, so nothing is
    saved or replicated any more), a byte of the newest replica of its
    shards, on the node that holds it, is changed in memory, and node 3
    is killed (kill -9 of agent and worker). The holder's agent checks the
    replica again before its workers load it, finds it changed and removes
    it; the other survivor's fetch of it is refused by its checksum. With
    the lost node's shards on no survivor any more, the job stops with the
    error that names them: nothing wrong was loaded."""
    events = tmp_path / "events"
    job = Job(procs, marker, elasticrun, tmp_path, "1:3", f"127.0.0.1:{store}",
              run_id="memory-corrupt", worker=FSDP_WORKER,
              extra=["--max-restarts", "1", "--faulty-scale-down-timeout", "1"],
              worker_args=[events, "--steps", "100000", "--save-every", "4"])
    for n in (1, 2, 3):
        job.start_agent(n, "--memory-replicas", "1", "--event-log",
                        str(tmp_path / f"agent{n}.events.jsonl"))
    all_replicated(job, tmp_path, (1, 2, 3), 3)
    [worker3] = {e["pid"] for e in map(json.loads, (events / "events.jsonl").read_text()
                                       .splitlines())
                 if e["event"] == "start" and e["world"] == 3
                 and parent_of(e["pid"]) == job.agents[3].pid}
    os.kill(worker3, signal.SIGSTOP)
    time.sleep(2)  # a replication under way ends (the replicator passes every 0.5 s)

    # The newest replica of node 3's shards, and the node that holds it.
    node3 = f"-{job.agents[3].pid}-"
    newest = max((int(e["snapshot"][5:14]), e["snapshot"], n) for n in (1, 2)
                 for e in agent_events(tmp_path / f"agent{n}.events.jsonl", "memory_replicate")
                 if node3 in e["source"] and e["snapshot"].endswith("of3"))
    _, name, holder = newest
    [tier] = SHM.glob(f"elasticrun-mem-{job.agents[holder].pid}-*")
    victim = max((tier / name).iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))

    job.agents[3].popen.send_signal(signal.SIGKILL)
    assert job.agents[3].wait(30) == -signal.SIGKILL
    finish(job, marker, {1: 1, 2: 1, 3: -signal.SIGKILL})
    out = job.agents[holder].stdout() + job.agents[holder].stderr()
    assert f"{name}: {victim.name} changed in memory since its checksum was made; removed, " \
           "not loaded" in out, job.agents[holder].describe()
    other = 3 - holder
    both = out + job.agents[other].stdout() + job.agents[other].stderr()
    assert "cannot be restored from the memory tier" in both, job.agents[other].describe()
    assert not loads(events, 2), loads(events, 2)
    assert not tiers_of(job), tiers_of(job)


def test_two_nodes_lost_at_once_with_one_replica_fall_back_to_the_checkpoint_directory(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    """FSDP2 on three nodes, --memory-replicas 1, and a checkpoint directory
    as well (every save goes to both). Two nodes are killed at once (kill
    -9 of agents and workers): one rank's shards were on those two only, so
    no step can be put together from the survivor's memory, and the job
    goes on alone from the directory's newest checkpoint, bit for bit the
    state saved at that step."""
    events, ckpt = tmp_path / "events", tmp_path / "ckpt"
    job = Job(procs, marker, elasticrun, tmp_path, "1:3", f"127.0.0.1:{store}",
              run_id="memory-disk", worker=FSDP_WORKER,
              extra=["--max-restarts", "1", "--faulty-scale-down-timeout", "1"],
              worker_args=[events, "--steps", "100000", "--save-every", "4", "--ckpt", ckpt])
    for n in (1, 2, 3):
        job.start_agent(n, "--memory-replicas", "1", "--event-log",
                        str(tmp_path / f"agent{n}.events.jsonl"))
    all_replicated(job, tmp_path, (1, 2, 3), 3)
    wait_for(lambda: (ckpt / "latest").exists(), "a checkpoint in the directory",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    for n in (2, 3):
        job.agents[n].popen.send_signal(signal.SIGKILL)
    for n in (2, 3):
        assert job.agents[n].wait(30) == -signal.SIGKILL

    wait_for(lambda: loads(events, 1) or None, "a load at world 1", timeout=2 * GEN_TIMEOUT_S,
             proc=job.agents[1])
    load = loads(events, 1)[0]
    saved = {e["step"]: e["digest"] for e in saves(events, world=3)}
    assert load["source"] == "directory", load
    assert load["digest"] == saved[load["step"]], (load, saved)
    job.agents[1].popen.send_signal(signal.SIGTERM)
    finish(job, marker, {1: 128 + signal.SIGTERM, 2: -signal.SIGKILL, 3: -signal.SIGKILL})
    assert not tiers_of(job), tiers_of(job)
