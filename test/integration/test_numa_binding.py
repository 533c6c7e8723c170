"""--numa-binding: each worker runs on the CPUs torchrun would bind it to.

The agent reads the GPUs and the NUMA topology from a fake sysfs tree
(ELASTICRUN_TEST_SYSFS_ROOT, a test-only variable) and binds the workers for
real, so every fake CPU is one of this machine's: 0 or 1. Two layouts:

  two-nodes  GPU 0000:1b:00.0 on NUMA node 0 (CPU 0), GPU 0000:9a:00.0 on
             node 1 (CPU 1), both nodes in socket 0, each CPU a core and
             core complex of its own
  one-node   both GPUs on node 0 (CPUs 0-1), otherwise the same

Without a GPU the agent fails before it starts anything, as torchrun fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import WORKERS
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
)

PROBE = WORKERS / "numa_probe.py"

pytestmark = pytest.mark.skipif(
    not {0, 1} <= os.sched_getaffinity(0), reason="binds workers to CPUs 0 and 1"
)


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sysfs(root: Path, layout: str) -> Path:
    gpus = {"0000:1b:00.0": 0, "0000:9a:00.0": 1 if layout == "two-nodes" else 0}
    nodes = {0: "0", 1: "1"} if layout == "two-nodes" else {0: "0-1"}
    write(root, "sys/devices/system/node/possible", "0-1" if layout == "two-nodes" else "0")
    for node, cpus in nodes.items():
        write(root, f"sys/devices/system/node/node{node}/cpulist", cpus)
    for cpu in (0, 1):
        base = f"sys/devices/system/cpu/cpu{cpu}"
        write(root, f"{base}/topology/physical_package_id", "0")
        write(root, f"{base}/topology/thread_siblings_list", str(cpu))
        write(root, f"{base}/cache/index3/level", "3")
        write(root, f"{base}/cache/index3/type", "Unified")
        write(root, f"{base}/cache/index3/shared_cpu_list", str(cpu))
    for address, node in gpus.items():
        write(root, f"proc/driver/nvidia/gpus/{address}/information",
              f"Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t {address}\nGPU Excluded:\t No")
        write(root, f"sys/bus/pci/devices/{address}/numa_node", str(node))
    return root


def run(procs, marker, elasticrun, tmp_path: Path, name: str, sysfs: Path, flags, nproc=2,
        **env):
    probe_dir = tmp_path / f"probe-{name}"
    probe_dir.mkdir()
    # launcher_env hides every GPU (CUDA_VISIBLE_DEVICES=""); the fake ones must show.
    env = {"CUDA_VISIBLE_DEVICES": None, **env}
    e = launcher_env(marker, tmp_path / "tmp", NUMA_PROBE_DIR=str(probe_dir),
                     ELASTICRUN_TEST_SYSFS_ROOT=str(sysfs), **env)
    proc = procs.spawn([elasticrun, "--standalone", "--nproc-per-node", str(nproc), *flags,
                        str(PROBE)], name, env=e, cwd=tmp_path)
    code = proc.wait(RUN_TIMEOUT_S)
    records = {int(p.stem.removeprefix("rank")): json.loads(p.read_text())
               for p in probe_dir.glob("rank*.json")}
    return proc, code, records


EXPECTED = {
    ("two-nodes", "node"): ["0", "1"],
    ("two-nodes", "socket"): ["0-1", "0-1"],
    ("two-nodes", "exclusive"): ["0", "1"],
    ("two-nodes", "core-complex"): ["0", "1"],
    ("one-node", "node"): ["0-1", "0-1"],
    ("one-node", "socket"): ["0-1", "0-1"],
    ("one-node", "exclusive"): ["0", "1"],
    ("one-node", "core-complex"): ["0", "1"],
}


@pytest.mark.parametrize("layout,mode", sorted(EXPECTED))
def test_each_worker_and_its_threads_run_on_the_cpus_of_its_mode(procs, marker, elasticrun,
                                                                 tmp_path, layout, mode):
    sysfs = fake_sysfs(tmp_path / "sysfs", layout)
    proc, code, records = run(procs, marker, elasticrun, tmp_path, f"{layout}-{mode}", sysfs,
                              ["--numa-binding", mode])
    assert code == 0, proc.describe()
    assert sorted(records) == [0, 1], proc.describe()
    assert [records[r]["cpus"] for r in (0, 1)] == EXPECTED[(layout, mode)]
    assert [records[r]["thread_cpus"] for r in (0, 1)] == EXPECTED[(layout, mode)]
    assert f"--numa-binding={mode}: local rank 1 (GPU " in proc.stderr()


def test_local_rank_i_follows_cuda_device_i_of_cuda_visible_devices(procs, marker, elasticrun,
                                                                    tmp_path):
    sysfs = fake_sysfs(tmp_path / "sysfs", "two-nodes")
    proc, code, records = run(procs, marker, elasticrun, tmp_path, "visible", sysfs,
                              ["--numa-binding", "node"], CUDA_VISIBLE_DEVICES="1,0")
    assert code == 0, proc.describe()
    assert [records[r]["cpus"] for r in (0, 1)] == ["1", "0"]


def test_warm_interpreters_are_bound_before_they_import_torch(procs, marker, elasticrun,
                                                              tmp_path):
    # One worker, so the agent leaves OMP_NUM_THREADS unset and OpenMP sizes
    # itself by the CPUs the interpreter could use when it imported torch:
    # bound only when it took its worker, it would count both CPUs.
    sysfs = fake_sysfs(tmp_path / "sysfs", "two-nodes")
    for kind, extra in (("cold", []), ("warm", ["--warm-start"])):
        proc, code, records = run(procs, marker, elasticrun, tmp_path, kind, sysfs,
                                  ["--numa-binding", "node", *extra], nproc=1,
                                  NUMA_PROBE_TORCH="1", OMP_NUM_THREADS=None)
        assert code == 0, proc.describe()
        assert records[0]["torch_imported"] is (kind == "warm"), proc.describe()
        assert records[0]["cpus"] == "0"
        assert records[0]["torch_threads"] == 1, f"{kind}: {records[0]}"


def test_a_warm_worker_gets_an_interpreter_bound_like_it(procs, marker, elasticrun, tmp_path):
    sysfs = fake_sysfs(tmp_path / "sysfs", "two-nodes")
    proc, code, records = run(procs, marker, elasticrun, tmp_path, "warm2", sysfs,
                              ["--numa-binding", "node", "--warm-start"])
    assert code == 0, proc.describe()
    assert [records[r]["cpus"] for r in (0, 1)] == ["0", "1"]
    assert all(records[r]["torch_imported"] for r in (0, 1)), "the workers started cold"
    assert "2 in warm interpreters" in proc.stderr()


@pytest.mark.parametrize("visible,workers", [(None, 2), ("1", 1)])
def test_nproc_per_node_gpu_starts_one_worker_per_gpu_the_workers_will_see(
        procs, marker, elasticrun, tmp_path, visible, workers):  # noqa: F811
    sysfs = fake_sysfs(tmp_path / "sysfs", "two-nodes")
    proc, code, records = run(procs, marker, elasticrun, tmp_path, "gpu", sysfs, [], nproc="gpu",
                              CUDA_VISIBLE_DEVICES=visible)
    assert code == 0, proc.describe()
    assert sorted(records) == list(range(workers)), proc.describe()


@pytest.mark.parametrize("case", ["no driver", "all hidden", "too few GPUs"])
def test_without_a_gpu_for_every_local_rank_the_agent_fails_before_starting_anything(
        procs, marker, elasticrun, tmp_path, case):
    if case == "no driver":
        sysfs, env, nproc, message = tmp_path / "empty", {}, 2, "no NVIDIA GPU found"
        sysfs.mkdir()
    elif case == "all hidden":
        sysfs = fake_sysfs(tmp_path / "sysfs", "two-nodes")
        env, nproc, message = {"CUDA_VISIBLE_DEVICES": ""}, 2, "no NVIDIA GPU found"
    else:
        sysfs = fake_sysfs(tmp_path / "sysfs", "two-nodes")
        env, nproc, message = {}, 3, "local rank 2 has no GPU of its own: 2 visible"
    proc, code, records = run(procs, marker, elasticrun, tmp_path, "nogpu", sysfs,
                              ["--numa-binding", "node"], nproc=nproc, **env)
    assert code == 1, proc.describe()
    assert message in proc.stderr(), proc.describe()
    assert records == {}, "no worker may start"
    assert "worker(s)" not in proc.stderr(), "the agent went on to start workers"


@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="this machine has GPUs")
def test_on_a_machine_without_gpus_torchrun_fails_too_with_exit_1(procs, marker, torchrun,
                                                                  tmp_path):
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    e = launcher_env(marker, tmp_path / "tmp", NUMA_PROBE_DIR=str(probe_dir),
                     CUDA_VISIBLE_DEVICES=None)
    proc = procs.spawn([torchrun, "--standalone", "--nproc-per-node", "1", "--numa-binding",
                        "node", str(PROBE)], "torchrun-nogpu", env=e, cwd=tmp_path)
    assert proc.wait(RUN_TIMEOUT_S) == 1, proc.describe()
    assert "No accelerator available for NUMA binding" in proc.stderr()
    assert list(probe_dir.iterdir()) == []
