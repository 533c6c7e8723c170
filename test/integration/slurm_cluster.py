"""A real SLURM cluster of one node on this machine, for the tests: munged
with a key and socket of its own, slurmctld and slurmd (Debian's slurm-wlm)
in the foreground on free loopback ports, every file under one directory.
Nothing of the machine's own SLURM or munge set-up is read or touched:
clients find the cluster through SLURM_CONF, the daemons through -f.

slurmd runs jobs as their users and must be root; without root, or without
the daemons (scripts/setup.sh installs them), the tests that need a
cluster skip."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Proc, Procs
from launcher_fixtures import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
START_TIMEOUT_S = 60


def _find(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None)


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    cpus: int
    daemons: list[Proc]

    def env(self, base: dict) -> dict:
        """`base` with the cluster's SLURM_CONF, for srun, sbatch and scancel."""
        return {**base, "SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout: float = 30) -> str:
        """Runs a client command (sinfo, squeue, scancel); its stdout."""
        done = subprocess.run(list(args), env=self.env(dict(os.environ)), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done.stdout

    def stop(self) -> None:
        """Stops the daemons, slurmd first; fails if one does not go."""
        for proc in reversed(self.daemons):
            if proc.popen.poll() is None:
                proc.popen.terminate()
            proc.wait(30)

    def job_state(self, job: str) -> str:
        """The job's state as squeue tells it; empty once it left the queue."""
        return self.command("squeue", "-h", "-j", job, "-o", "%T").strip()


def _config(root: Path, node: str, cpus: int) -> str:
    return f"""\
ClusterName=elasticrun-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=30
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def start_cluster(procs: Procs, root: Path) -> SlurmCluster:
    missing = [d for d in DAEMONS if _find(d) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)} here (scripts/setup.sh installs slurm-wlm, munge)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root")
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    node = socket.gethostname()
    try:
        socket.getaddrinfo(node, None)
    except OSError:
        pytest.skip(f"this machine's name {node} does not resolve: srun's node list names it")
    cpus = os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(_config(root, node, cpus))
    # The daemons get a plain environment: no test marker, no venv.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(conf)}
    daemons = [procs.spawn([_find("munged"), "--foreground", f"--socket={root}/munge/socket",
                 f"--key-file={key}", f"--pid-file={root}/munge/pid",
                 f"--log-file={root}/munge/log", f"--seed-file={root}/munge/seed", "--force"],
                "munged", env=env)]
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (root / "munge" / "socket").exists():
        if time.monotonic() > deadline:
            pytest.fail(f"munged made no socket\n{(root / 'munge' / 'log').read_text()}")
        time.sleep(0.05)
    daemons.append(procs.spawn([_find("slurmctld"), "-D", "-i", "-f", conf], "slurmctld", env=env))
    daemons.append(procs.spawn([_find("slurmd"), "-D", "-f", conf], "slurmd", env=env))
    cluster = SlurmCluster(root, conf, node, cpus, daemons)
    while True:
        try:
            if cluster.command("sinfo", "-h", "-o", "%t", timeout=10).strip() == "idle":
                return cluster
        except (AssertionError, subprocess.TimeoutExpired):
            pass
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text()[-2000:] for p in (root / "log").glob("*.log"))
            pytest.fail(f"the SLURM node did not become idle\n{logs}")
        time.sleep(0.2)
