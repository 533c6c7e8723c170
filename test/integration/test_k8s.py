"""The Kubernetes examples (examples/k8s/), each container's command run as
Kubernetes would run it, with the environment it would set: there is no
cluster here.

- The Indexed Job: two pods, each in UTS and mount namespaces of its own
  with the hostname trainer-<index> and the /etc/hosts Kubernetes writes
  for a pod of a headless Service's subdomain (the pods' addresses:
  127.0.0.10 and .11). elasticrun finds index 0 by that name.
- The elastic PyTorchJob: the PET_ variables Kubeflow's training operator
  sets; deleting a pod (SIGTERM to its agent) is a graceful leave, and the
  other pod trains on alone."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import yaml

import step_log
from conftest import REPO
from elastic_job import PYTHON_SDK
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

K8S = REPO / "examples" / "k8s"
DOMAIN = "trainers.default.svc.cluster.local"


def container(manifest: str, kind: str) -> dict:
    docs = list(yaml.safe_load_all((K8S / manifest).read_text()))
    obj = next(d for d in docs if d["kind"] == kind)
    spec = obj["spec"]["template"]["spec"] if kind == "Job" else \
        obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return {"pod": spec, "container": spec["containers"][0], "object": obj}


def command(c: dict, elasticrun, tmp_path: Path, **overrides: str) -> list[str]:  # noqa: F811
    """The container's command on this machine: our binary, the repository
    for /workspace, tmp_path for /ckpt, flags of the script overridden."""
    args = [str(elasticrun)] + c["container"]["command"][1:]
    out = []
    for a in args:
        a = a.replace("/workspace", str(REPO)).replace("/ckpt", str(tmp_path / "ckpt"))
        name = a.split("=", 1)[0].lstrip("-")
        out.append(f"--{name}={overrides[name]}" if name in overrides else a)
    return out + ["--log", str(tmp_path / "log")]


def pod_env(c: dict, marker: str, tmp_path: Path, **extra: str) -> dict:  # noqa: F811
    env = {e["name"]: e["value"] for e in c["container"].get("env", [])}
    return launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(PYTHON_SDK), **env, **extra)


def records(tmp_path: Path) -> dict[int, list[dict]]:
    return step_log.by_rank(tmp_path / "log")


def test_the_manifests_tie_the_grace_period_to_the_shutdown_flags():
    for manifest, kind in (("indexed-job.yaml", "Job"), ("pytorchjob-elastic.yaml", "PyTorchJob")):
        c = container(manifest, kind)
        flags = dict(a.lstrip("-").split("=", 1) for a in c["container"]["command"]
                     if a.startswith("--") and "=" in a)
        need = int(flags["graceful-shutdown-timeout"]) + int(flags["shutdown-timeout"])
        assert c["pod"]["terminationGracePeriodSeconds"] > need, manifest


def test_an_indexed_jobs_pods_find_index_0_by_their_dns_names(procs, marker, elasticrun,
                                                               tmp_path):  # noqa: F811
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a pod's hostname and /etc/hosts need root and unshare")
    c = container("indexed-job.yaml", "Job")
    assert c["pod"]["subdomain"] == "trainers"
    completions = c["object"]["spec"]["completions"]
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(
        f"127.0.0.{10 + i} trainer-{i}.{DOMAIN} trainer-{i}\n" for i in range(completions)))
    # As the kubelet makes a pod: its own hostname and /etc/hosts.
    pod = ["unshare", "--uts", "--mount", "sh", "-c",
           f'hostname "$POD" && mount --bind {hosts} /etc/hosts && exec "$@"', "pod"]
    pods = [procs.spawn(pod + command(c, elasticrun, tmp_path), f"trainer-{i}",
                        env=pod_env(c, marker, tmp_path, POD=f"trainer-{i}", HOSTNAME=f"trainer-{i}",
                                    JOB_COMPLETION_INDEX=str(i)))
            for i in range(completions)]
    for p in pods:
        assert p.wait(RUN_TIMEOUT_S) == 0, "\n".join(q.describe() for q in pods)
    for i, p in enumerate(pods):
        assert (f"Kubernetes Indexed Job, completion index {i}: --rdzv-backend c10d "
                f"(JOB_COMPLETION_INDEX), --rdzv-endpoint trainer-0.{DOMAIN}:29400") in p.stderr()
    got = records(tmp_path)
    assert sorted(got) == list(range(completions))
    for steps in got.values():
        assert [r["step"] for r in steps] == list(range(1, 9))
        assert {r["world"] for r in steps} == {completions}


def test_a_deleted_pytorchjob_pod_leaves_gracefully_and_the_job_trains_on(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    c = container("pytorchjob-elastic.yaml", "PyTorchJob")
    policy = c["object"]["spec"]["elasticPolicy"]
    # What the operator sets in every worker pod.
    operator = {"PET_RDZV_BACKEND": policy["rdzvBackend"],
                "PET_RDZV_ENDPOINT": f"127.0.0.1:{free_port()}",
                "PET_RDZV_ID": c["object"]["metadata"]["name"],
                "PET_NNODES": f"{policy['minReplicas']}:{policy['maxReplicas']}",
                "PET_MAX_RESTARTS": str(policy["maxRestarts"])}
    cmd = command(c, elasticrun, tmp_path, steps="40")
    pods = [procs.spawn(cmd, f"worker-{i}", env=pod_env(c, marker, tmp_path, **operator))
            for i in range(2)]

    def both_trained() -> bool:
        got = records(tmp_path)
        return len(got) == 2 and all(len(r) >= 5 and r[-1]["world"] == 2 for r in got.values())
    wait_for(both_trained, "five steps at world size 2", others=pods)
    os.kill(pods[1].pid, signal.SIGTERM)  # the pod is deleted
    assert pods[1].wait(RUN_TIMEOUT_S) == 128 + signal.SIGTERM, pods[1].describe()
    assert pods[0].wait(RUN_TIMEOUT_S) == 0, pods[0].describe()
    gone = pods[1].stderr()
    assert "received SIGTERM: this node leaves the job" in gone, gone
    stop = int(next(line for line in gone.splitlines()
                    if "every worker stops at step" in line).rsplit(" ", 1)[1])
    assert (tmp_path / "ckpt" / "elastic-trainer" / f"step_{stop:09d}").is_dir()
    steps = records(tmp_path)[0]
    assert [r["step"] for r in steps] == list(range(1, 41)), "a step lost or repeated"
    assert {r["world"] for r in steps if r["step"] > stop} == {1}
