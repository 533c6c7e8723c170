"""elasticrun under a real SLURM (slurm_cluster.py: munged, slurmctld and
slurmd started here, one node on this machine or two on hosts made of
network namespaces): `srun elasticrun --nproc-per-node 1 train.py` needs
no rendezvous flag, each task being one node of the job,
and SLURM's preemption and time-limit signals (scancel's SIGTERM, the
SIGUSR1 of --signal=USR1@60) stop every rank at one agreed step after its
checkpoint. SLURM signals every process of a step, so the workers receive
the SIGTERM too (python/elasticrun/_leave.py)."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

import netns
import step_log
from conftest import Procs
from elastic_job import PYTHON_SDK
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
)
from slurm_cluster import start_cluster

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "python" / "train_elastic.py"
TASKS = 2


@pytest.fixture(scope="module", params=["one-node", "two-hosts"])
def slurm(request, tmp_path_factory):
    """Both tasks on one node, or each on a node (a host) of its own."""
    procs = Procs(tmp_path_factory.mktemp("slurm-daemons"))
    net = None
    if request.param == "two-hosts":
        if why := netns.probe():
            # CI runs as root: a skip there would hide a broken setup.
            if os.environ.get("CI"):
                pytest.fail(f"{why} (CI is set: the suite runs as root there)", pytrace=False)
            pytest.skip(why)
        net = netns.Network(TASKS, hub_host=True)
    try:
        cluster = start_cluster(procs, tmp_path_factory.mktemp("slurm"), net)
        yield cluster
        cluster.stop()
        left = procs.reap_all()
        assert not left, left
    finally:
        if net is not None:
            killed = net.close()
            assert not killed, killed


def job_env(slurm, marker, tmp_path: Path) -> dict:  # noqa: F811
    return slurm.env(launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(PYTHON_SDK),
                                  OMP_NUM_THREADS="1"))


def allocation(slurm) -> list[str]:
    """TASKS tasks spread over every node of the cluster."""
    return ["-N", str(len(slurm.nodes)), "-n", str(TASKS)]


def train_command(slurm, elasticrun, tmp_path: Path, steps: int,  # noqa: F811
                  *extra: str) -> list[str]:
    return ["srun", *allocation(slurm), "-l", str(elasticrun), "--nproc-per-node", "1",
            str(TRAIN), "--steps", str(steps), "--log", str(tmp_path / "log"), *extra]


def records(tmp_path: Path) -> dict[int, list[dict]]:
    return step_log.by_rank(tmp_path / "log")


def test_srun_gives_the_rendezvous_each_task_one_node(procs, slurm, marker, elasticrun,
                                                      tmp_path):  # noqa: F811
    run = procs.spawn(slurm.argv(*train_command(slurm, elasticrun, tmp_path, 8, "--step-s",
                                                "0.02", "--ckpt", str(tmp_path / "ckpt"))),
                      "srun", env=job_env(slurm, marker, tmp_path))
    assert run.wait(RUN_TIMEOUT_S) == 0, run.describe()
    out = run.stdout() + run.stderr()
    # Each agent says once what it read, and one of them hosts the store.
    read = [line for line in out.splitlines() if "(SLURM_STEP_NUM_TASKS)" in line]
    assert len(read) == TASKS, out
    assert f"--rdzv-endpoint {slurm.node}:29400 (SLURM_STEP_NODELIST)" in read[0]
    assert out.count("hosting the rendezvous store on") == 1, out
    # On the first node, on its address: the other node's agent and
    # worker reach it across the hosts' network.
    assert f"store listening on {slurm.addrs[0]}:29400" in out, out
    got = records(tmp_path)
    assert sorted(got) == [0, 1], out
    for rank, steps in got.items():
        assert [r["step"] for r in steps] == list(range(1, 9)), (rank, steps)
        assert {r["world"] for r in steps} == {TASKS}
    for a, b in zip(got[0], got[1]):
        assert not set(a["indices"]) & set(b["indices"]), (a["step"], "a sample used twice")


@pytest.mark.parametrize("sig", ["TERM", "USR1"])
def test_a_preemption_signal_stops_every_rank_at_one_step_after_its_checkpoint(
        procs, slurm, marker, elasticrun, tmp_path, sig):  # noqa: F811
    ckpt = tmp_path / "ckpt"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n" + " ".join(
        train_command(slurm, elasticrun, tmp_path, 100000, "--step-s", "0.05", "--ckpt", str(ckpt),
                      "--save-every", "100000")) + "\n")
    script.chmod(0o755)
    out = tmp_path / "job.out"
    submit = procs.run(slurm.argv("sbatch", "--parsable", *allocation(slurm), "-o", out, script),
                       "sbatch", timeout=30, env=job_env(slurm, marker, tmp_path))
    assert submit.popen.returncode == 0, submit.describe()
    job = submit.stdout().strip().split(";")[0]

    def steps_done() -> bool:
        got = records(tmp_path)
        return len(got) == TASKS and min(len(r) for r in got.values()) >= 5
    wait_for(steps_done, "five steps on every rank")
    # scancel's default is SIGTERM to every process of the step (KillWait,
    # then SIGKILL); --signal=USR1 is what --signal=USR1@60 sends before the limit.
    slurm.command("scancel", *([] if sig == "TERM" else ["--signal=USR1"]), job)
    wait_for(lambda: slurm.job_state(job) == "", f"job {job} to leave the queue",
             timeout=RUN_TIMEOUT_S)
    text = out.read_text()
    stops = {line.rsplit(" ", 1)[1] for line in text.splitlines()
             if "every worker stops at step" in line}
    assert len(stops) == 1, text
    stop = int(stops.pop())
    assert f"received SIG{sig}: this node leaves the job" in text, text
    assert "SIGKILL" not in text, text
    # Both ranks trained to the agreed step and no further; its checkpoint is there.
    got = records(tmp_path)
    assert {r[-1]["step"] for r in got.values()} == {stop}, text
    assert (ckpt / f"step_{stop:09d}").is_dir(), sorted(p.name for p in ckpt.iterdir())
    # Every agent ends with the signal, as torchrun's exit status tells it.
    # ("tasks 0-1: ..." from one node, a line per task from two).
    exits = re.findall(r"tasks? ([0-9,-]+): Exited with exit code (\d+)", text)
    assert {int(code) for _, code in exits} == {128 + signal.Signals["SIG" + sig]}, text
    assert sorted(task for tasks, _ in exits for task in expand(tasks)) == list(range(TASKS)), text


def expand(tasks: str) -> list[int]:
    """srun's task list ("0-1", "0,2-3") as numbers."""
    out = []
    for part in tasks.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out
