"""An elastic job for the integration suites: real `elasticrun` agents (one
gloo worker each) around one rendezvous store, and what their workers logged.

Workers (workers/elastic_worker.py and elastic_sdk_worker.py) append JSON
lines to <tmp>/events/events.jsonl: "start", "steady" (5 collective steps
done), "stop", "finish", "mismatch", each with the generation, rank, world
size, group rank and the agent's pid, so a test can tell which agent ran
what. Agents are numbered by the test (n): 127.0.0.n by default, or a
network namespace's host n (test_elastic_netns.py).

Windows are shortened (heartbeats of 0.2 s, a scaling timeout of 1 s, no
stable period); timeouts only bound hangs.
"""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

import pytest

from conftest import REPO, WORKERS, Proc, elasticctl  # noqa: F401 (fixture)
from launcher_fixtures import launcher_env, wait_for

WORKER = WORKERS / "elastic_worker.py"
SDK_WORKER = WORKERS / "elastic_sdk_worker.py"
PYTHON_SDK = REPO / "python"
# A generation needs every worker to import torch and join gloo: seconds each
# on a loaded 2-core machine.
GEN_TIMEOUT_S = 120

RDZV_CONF = "heartbeat_interval=0.2,missed_heartbeats=5,last_call_timeout=0.5,join_timeout=60"
FAST = [
    "--scaling-timeout", "1",
    "--min-stable-period", "0",
    "--graceful-shutdown-timeout", "10",
]


@pytest.fixture
def store(procs, elasticctl):  # noqa: F811
    """`elasticctl store` on 127.0.0.1; yields its port."""
    proc = procs.spawn([elasticctl, "store", "--host", "127.0.0.1", "--port", "0"], "store")
    host, port = proc.wait_for_listen_line()
    yield port
    proc.popen.send_signal(signal.SIGTERM)
    proc.wait(30)


class Job:
    def __init__(self, procs, marker, elasticrun, tmp_path: Path, nnodes: str, endpoint: str,
                 *, run_id: str = "elastic-test", extra: list[str] | None = None,
                 worker: Path = WORKER, rdzv_conf: str = RDZV_CONF,
                 addr: Callable[[int], str] = lambda n: f"127.0.0.{n}",
                 exec_prefix: Callable[[int], list] = lambda n: [],
                 env: dict[str, str] | None = None, worker_args: list | None = None,
                 backend: str = "c10d"):
        self.procs, self.marker, self.elasticrun = procs, marker, elasticrun
        self.tmp_path, self.nnodes, self.endpoint = tmp_path, nnodes, endpoint
        self.run_id, self.extra, self.worker, self.rdzv_conf = run_id, extra or [], worker, rdzv_conf
        self.addr, self.exec_prefix, self.env = addr, exec_prefix, env or {}
        self.backend = backend
        self.dir = tmp_path / "events"
        self.dir.mkdir()
        self.agents: dict[int, Proc] = {}
        # Before any of its agents started: what they made is no older.
        self.created = time.time()
        # What follows the worker script: by default the events directory
        # of workers/elastic_worker.py; other workers take their own flags.
        self.worker_args = ["--dir", self.dir] if worker_args is None else worker_args

    def start_agent(self, n: int, *flags: str) -> Proc:
        env = launcher_env(self.marker, self.tmp_path / "tmp",
                           **{"OMP_NUM_THREADS": "1", "PYTHONPATH": str(PYTHON_SDK), **self.env})
        args = [*self.exec_prefix(n), self.elasticrun, "--nnodes", self.nnodes,
                "--nproc-per-node", "1", "--rdzv-backend", self.backend,
                "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.run_id,
                "--local-addr", self.addr(n), "--rdzv-conf", self.rdzv_conf,
                *FAST, *self.extra, *flags, self.worker, *self.worker_args]
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

    def grow_from_two_to_three(self) -> tuple[int, int]:
        """Agents 1 and 2 reach a steady generation, agent 3 joins, the three
        reach the next one, and the workers finish (every agent exits 0);
        returns the two generations."""
        self.start_agent(1)
        self.start_agent(2)
        g2 = self.wait_steady(2)
        self.start_agent(3)
        g3 = self.wait_steady(3, after_gen=g2)
        self.finish({1: 0, 2: 0, 3: 0})
        return g2, g3

    def leave_from_three_to_two(self) -> tuple[int, int]:
        """Agents 1-3 reach a steady generation, agent 3 gets SIGTERM and
        exits 128+SIGTERM, agents 1 and 2 reach the next one; returns the two
        generations."""
        for n in (1, 2, 3):
            self.start_agent(n)
        g3 = self.wait_steady(3)
        self.agents[3].popen.send_signal(signal.SIGTERM)
        assert self.agents[3].wait(GEN_TIMEOUT_S) == 128 + signal.SIGTERM, \
            self.agents[3].describe()
        g2 = self.wait_steady(2, after_gen=g3)
        assert g2 > g3
        return g3, g2

    def agent_of(self, gen: int, group_rank: int) -> int:
        """The test's agent number running group rank `group_rank` in `gen`."""
        for e in self.by_gen("start")[gen]:
            if e["group_rank"] == group_rank:
                for n, p in self.agents.items():
                    if p.pid == e["agent"]:
                        return n
        pytest.fail(f"no agent ran group rank {group_rank} in generation {gen}")

    def agents_in(self, gen: int) -> set[int]:
        """The test's agent numbers that ran a worker in `gen`."""
        pids = {e["agent"] for e in self.by_gen("start")[gen]}
        return {n for n, p in self.agents.items() if p.pid in pids}

    def finish(self, expected: dict[int, int]) -> None:
        """Lets the workers stop (all at one step) and checks each agent's exit status."""
        (self.dir / "finish").write_text("1")
        for n, code in expected.items():
            got = self.agents[n].wait(GEN_TIMEOUT_S)
            assert got == code, f"agent{n} exited {got}, expected {code}\n{self.agents[n].describe()}"

    def stopped_together(self, old: int, old_world: int, new: int, new_world: int) -> int:
        """Every rank of generation `old` stopped by itself (exit 0, told by
        SIGUSR1 and the control block) at one step, from which every rank of
        `new` resumed; returns that step (workers/elastic_sdk_worker.py)."""
        stops = self.by_gen("stop")[old]
        assert len(stops) == old_world, self.events()
        assert len({e["step"] for e in stops}) == 1, stops
        assert all(e["signal"] for e in stops), stops
        starts = self.by_gen("start")[new]
        assert len(starts) == new_world and {e["step"] for e in starts} == {stops[0]["step"]}, \
            starts
        assert not [e for e in self.events() if e["event"] == "mismatch"]
        return stops[0]["step"]

    def check_generations(self) -> None:
        """Every generation: one WORLD_SIZE, ranks without duplicates or gaps
        (a generation cut short may lack ranks that never started, but one
        that reached the steady step has them all), no wrong all_reduce."""
        assert not [e for e in self.events() if e["event"] == "mismatch"], self.events()
        for gen, starts in self.by_gen("start").items():
            worlds = {e["world"] for e in starts}
            assert len(worlds) == 1, f"generation {gen}: different WORLD_SIZE {worlds}"
            ranks = sorted(e["rank"] for e in starts)
            world = worlds.pop()
            assert len(set(ranks)) == len(ranks) and all(0 <= r < world for r in ranks), (gen, ranks)
        for gen, steady in self.by_gen("steady").items():
            assert sorted(e["rank"] for e in steady) == list(range(steady[0]["world"])), (gen, steady)
