"""GPU health (--gpu-health, docs/health.md) against real agents, without a GPU.

The agent finds the workers' GPUs in a fake driver tree (two GPUs under
ELASTICRUN_TEST_SYSFS_ROOT, as test_numa_binding.py) and loads the test
tree's fake NVML (ELASTICRUN_NVML_LIBRARY=$FAKE_NVML, test/tools/fake_nvml.cpp),
which answers from a state file the test rewrites while the job runs: an
XID raised on a GPU mid-run is a fault of the node, recorded in fault.json
and handled as a failure (the job fails, or restarts); where there is no
NVML or no GPU, one line says GPU health is skipped and the job runs as
always. Nothing is left running (the marker fixture).

Workers are workers/health_worker.py (the SDK without torch) and, for the
job of two nodes, workers/survivor_worker.py (gloo). The fake is read every
5 s, the agent's GPU reading interval; timeouts only bound hangs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, WORKERS, elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    parse_failure_report,
    wait_for,
    wait_marked_gone,
)

HEALTH_WORKER = WORKERS / "health_worker.py"
SURVIVOR_WORKER = WORKERS / "survivor_worker.py"
SDK = REPO / "python"
GPU0, GPU1 = "0000:1b:00.0", "0000:9a:00.0"
WATCHING = f"GPU health: watching GPU {GPU0} (CUDA 0), GPU {GPU1} (CUDA 1) through NVML"


@pytest.fixture(scope="session")
def fake_nvml() -> Path:
    path = Path(os.environ.get("FAKE_NVML") or REPO / "build/dev/test/libfake_nvml.so")
    if not path.is_file():
        pytest.fail(f"FAKE_NVML: {path} is missing; build the fake_nvml target", pytrace=False)
    return path


class FakeGpus:
    """A driver tree with two GPUs and the fake NVML's state for them."""

    def __init__(self, root: Path):
        self.sysfs = root / "sysfs"
        self.state_file = root / "nvml_state.json"
        for address in (GPU0, GPU1):
            info = self.sysfs / "proc/driver/nvidia/gpus" / address / "information"
            info.parent.mkdir(parents=True)
            info.write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t {address}\n"
                            "GPU Excluded:\t No\n")
        self.state = {"gpus": {a: {"ecc_uncorrected": 0, "retired_pages_pending": False,
                                   "remap_pending": False, "remap_failed": False, "xids": []}
                               for a in (GPU0, GPU1)}}
        self.write()

    def write(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        os.replace(tmp, self.state_file)

    def raise_xid(self, address: str, xid: int) -> None:
        self.state["gpus"][address]["xids"].append(xid)
        self.write()

    def env(self, nvml: Path) -> dict:
        # launcher_env hides every GPU (CUDA_VISIBLE_DEVICES=""); the fake ones must show.
        return {"CUDA_VISIBLE_DEVICES": None, "ELASTICRUN_TEST_SYSFS_ROOT": str(self.sysfs),
                "ELASTICRUN_NVML_LIBRARY": str(nvml), "FAKE_NVML_STATE": str(self.state_file)}


def start(procs, marker, elasticrun, tmp_path: Path, env: dict, flags: list, worker_args: list):
    """A standalone job of two health workers; returns (proc, log dir, state dir)."""
    logs, state = tmp_path / "logs", tmp_path / "state"
    state.mkdir()
    proc = procs.spawn(
        [elasticrun, "--standalone", "--nproc-per-node", "2", "--log-dir", logs,
         "--hang-timeout", "off", *flags, HEALTH_WORKER, "--dir", state, *worker_args],
        "agent",
        env=launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(SDK), **env),
        cwd=tmp_path,
    )
    return proc, logs, state


def fault_record(logs: Path, attempt: int) -> dict:
    [path] = logs.glob(f"*/attempt_{attempt}/fault.json")
    return json.loads(path.read_text())


def raise_xid_once_running(proc, gpus: FakeGpus, state: Path, attempt: int) -> None:
    """Waits for the agent to watch the GPUs and both workers of `attempt`
    to run, then raises XID 79 (fallen off the bus) on GPU 1."""
    wait_for(lambda: WATCHING in proc.stderr(), "the agent to watch both GPUs", proc=proc)
    wait_for(lambda: len(list(state.glob(f"pid.*.attempt{attempt}"))) == 2,
             f"both workers of attempt {attempt}", proc=proc)
    gpus.raise_xid(GPU1, 79)


def test_an_xid_raised_mid_run_is_a_fault_of_the_node_and_fails_the_job(
        procs, marker, elasticrun, fake_nvml, tmp_path):
    gpus = FakeGpus(tmp_path)
    # Rank 1 stops stepping at step 3 and would wait forever (no hang limit):
    # only the GPU's fault can end the attempt.
    proc, logs, state = start(procs, marker, elasticrun, tmp_path, gpus.env(fake_nvml), [],
                              ["--mode", "hang", "--bad-rank", "1", "--at", "3",
                               "--steps", "100000"])
    raise_xid_once_running(proc, gpus, state, 0)
    assert proc.wait(RUN_TIMEOUT_S) == 1, proc.describe()
    fault = fault_record(logs, 0)
    assert fault["kind"] == "gpu" and fault["reason"] == "GpuError", fault
    assert fault["monitor"] == "gpu" and fault["local_rank"] == -1, fault
    assert f"GPU {GPU1} (CUDA 1) reported XID 79" in fault["message"], fault
    assert "fallen off the bus" in fault["message"], fault
    assert "health fault GpuError: GPU 0000:9a:00.0 (CUDA 1) reported XID 79" in proc.stderr()
    parse_failure_report(proc.stderr())
    left = wait_marked_gone(marker)
    assert not left, "processes of the job left behind:\n  " + "\n  ".join(left)


def test_an_xid_costs_one_restart_and_the_restarted_job_finishes(
        procs, marker, elasticrun, fake_nvml, tmp_path):
    gpus = FakeGpus(tmp_path)
    proc, logs, state = start(procs, marker, elasticrun, tmp_path, gpus.env(fake_nvml),
                              ["--max-restarts", "1"],
                              ["--mode", "hang", "--bad-attempt", "0", "--bad-rank", "1",
                               "--at", "3", "--steps", "20"])
    raise_xid_once_running(proc, gpus, state, 0)
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert fault_record(logs, 0)["kind"] == "gpu"
    # The XID was the first attempt's; the second ran on to its end.
    assert not list(logs.glob("*/attempt_1/fault.json"))
    assert len(list(state.glob("pid.*.attempt1"))) == 2
    assert proc.stderr().count(WATCHING) == 1, "NVML is opened once per agent"


def test_pending_remaps_and_non_hardware_xids_are_noted_once_and_the_job_runs_on(
        procs, marker, elasticrun, fake_nvml, tmp_path):
    gpus = FakeGpus(tmp_path)
    gpus.state["gpus"][GPU0]["remap_pending"] = True
    gpus.state["gpus"][GPU1]["xids"] = [63, 13]
    gpus.write()
    proc, logs, _ = start(procs, marker, elasticrun, tmp_path, gpus.env(fake_nvml), [],
                          ["--mode", "none", "--steps", "40"])
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    err = proc.stderr()
    assert err.count(f"GPU {GPU0} (CUDA 0): remapped rows are pending") == 1, err
    assert f"GPU {GPU1} (CUDA 1) reported XID 63" in err
    assert f"GPU {GPU1} (CUDA 1) reported XID 13" in err
    assert not list(logs.glob("*/attempt_0/fault.json"))


def test_with_gpu_health_off_nothing_is_watched(procs, marker, elasticrun, fake_nvml, tmp_path):
    gpus = FakeGpus(tmp_path)
    gpus.raise_xid(GPU1, 79)  # would be a note (before the attempt), and is not even that
    proc, logs, _ = start(procs, marker, elasticrun, tmp_path, gpus.env(fake_nvml),
                          ["--gpu-health", "off"], ["--mode", "none", "--steps", "10"])
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert "GPU health" not in proc.stderr()


@pytest.mark.parametrize("case", ["no NVML", "no driver", "GPUs hidden"])
def test_without_nvml_or_a_gpu_one_line_says_gpu_health_is_skipped_and_the_job_runs(
        procs, marker, elasticrun, fake_nvml, tmp_path, case):
    gpus = FakeGpus(tmp_path)
    env = gpus.env(fake_nvml)
    if case == "no NVML":
        env["ELASTICRUN_NVML_LIBRARY"] = str(tmp_path / "libnvidia-ml.so.1")
        note = "GPU health is skipped: cannot load NVML: "
    elif case == "no driver":
        env["ELASTICRUN_TEST_SYSFS_ROOT"] = str(tmp_path / "empty")
        note = "GPU health is skipped: no NVIDIA GPU here"
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        note = "GPU health is skipped: the workers see no NVIDIA GPU"
    proc, logs, _ = start(procs, marker, elasticrun, tmp_path, env, [],
                          ["--mode", "none", "--steps", "10"])
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    err = proc.stderr()
    assert err.count("GPU health") == 1 and note in err, err
    assert not list(logs.glob("*/attempt_0/fault.json"))


def test_an_xid_on_one_node_ends_the_round_for_every_node_and_the_job_goes_on(
        procs, marker, elasticrun, fake_nvml, tmp_path, store):  # noqa: F811
    """Two agents of a dynamic job, one gloo worker each; agent 1's worker
    sees GPU 0 of the fake tree, agent 2's GPU 1. In the first round rank 1
    never enters the step's all_reduce (and no hang limit would find it),
    so rank 0 blocks in it. An XID on GPU 1 is agent 2's fault alone: the
    round ends for both, rank 0 is released, agent 2 is excluded at once
    (the machine's error, not the job's) but admitted again, there being
    no one else, and the next round trains to the end."""
    gpus = FakeGpus(tmp_path)
    events = tmp_path / "events"
    job = Job(procs, marker, elasticrun, tmp_path, "2:2", f"127.0.0.1:{store}",
              worker=SURVIVOR_WORKER, env=gpus.env(fake_nvml),
              exec_prefix=lambda n: ["env", f"CUDA_VISIBLE_DEVICES={n - 1}"],
              worker_args=[events, "--mode", "absent", "--at", "10", "--steps", "40"],
              extra=["--hang-timeout", "off", "--max-restarts", "1"])
    job.start_agent(1)
    job.start_agent(2)
    for n, gpu in ((1, GPU0), (2, GPU1)):
        wait_for(lambda: f"GPU health: watching GPU {gpu} (CUDA 0) through NVML"
                 in job.agents[n].stderr(), f"agent {n} to watch {gpu}", proc=job.agents[n])

    def misbehaving():
        path = events / "events.jsonl"
        return path.exists() and '"misbehave"' in path.read_text()

    wait_for(misbehaving, "rank 1 to stay out of the all_reduce", timeout=GEN_TIMEOUT_S)
    gpus.raise_xid(GPU1, 48)
    for n in (1, 2):
        assert job.agents[n].wait(GEN_TIMEOUT_S * 2) == 0, job.agents[n].describe()
    left = wait_marked_gone(marker)
    assert not left, "processes of the job left behind:\n  " + "\n  ".join(left)

    recs = [json.loads(line) for line in (events / "events.jsonl").read_text().splitlines()]
    [released] = [r for r in recs if r["event"] == "released" and r["rank"] == 0]
    assert released["gen"] == 1, released
    assert {r["rank"] for r in recs if r["event"] == "finish" and r["gen"] > 1} == {0, 1}
    [fault] = [json.loads(p.read_text())
               for p in (tmp_path / "tmp").glob("torchelastic_*/*/attempt_0/fault.json")]
    assert fault["kind"] == "gpu", fault
    assert f"GPU {GPU1} (CUDA 0) reported XID 48" in fault["message"], fault
    assert "is excluded from the job" in job.agents[2].stderr(), job.agents[2].describe()
