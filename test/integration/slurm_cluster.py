"""A real SLURM cluster on this machine, for the tests: munged with a key
and socket of its own, slurmctld and slurmd (Debian's slurm-wlm) in the
foreground on free ports, every file under one directory. Nothing of the
machine's own SLURM or munge set-up is read or touched: clients find the
cluster through SLURM_CONF, the daemons through -f.

One node is this machine (its own name, loopback). Several are hosts of a
netns.Network: slurmctld runs in the hub (`ctl`, the hub's address),
node i's slurmd on host i (`node<i>`), each in network, mount and UTS
namespaces of its own: its hostname is its node name and its /etc/hosts
(a bind mount of a file under the cluster's directory) names every host,
so a job step sees the host a real cluster would give it. `ip netns exec`
is not used for them: it remounts /sys, hiding the cgroup tree slurmd
reads. Clients (srun, sbatch, sinfo) run in the hub too.

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
from netns import Network

DAEMONS = ("munged", "slurmctld", "slurmd")
START_TIMEOUT_S = 60


def _find(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None)


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    nodes: list[str]
    addrs: list[str]  # each node's address
    cpus: int
    daemons: list[Proc]
    client: list[str]  # what runs a client command where clients run

    @property
    def node(self) -> str:
        """The first node: the one whose name a step's endpoint takes."""
        return self.nodes[0]

    def env(self, base: dict) -> dict:
        """`base` with the cluster's SLURM_CONF, for srun, sbatch and scancel."""
        return {**base, "SLURM_CONF": str(self.conf)}

    def argv(self, *args) -> list:
        """A client command line (srun, sbatch, ...) as the test runs it."""
        return [*self.client, *args]

    def command(self, *args: str, timeout: float = 30) -> str:
        """Runs a client command (sinfo, squeue, scancel); its stdout."""
        done = subprocess.run(self.argv(*args), env=self.env(dict(os.environ)),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
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


def _config(root: Path, ctl: tuple[str, str], nodes: list[tuple[str, str]], cpus: int) -> str:
    node_lines = "".join(f"NodeName={name} NodeAddr={addr} CPUs={cpus} RealMemory=1000 "
                         "State=UNKNOWN\n" for name, addr in nodes)
    return f"""\
ClusterName=elasticrun-test
SlurmctldHost={ctl[0]}({ctl[1]})
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=30
{node_lines}PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _on_host(ns: str, hostname: str, hosts_file: Path) -> list[str]:
    """Prefix that runs a command in namespace `ns` as host `hostname`.
    nsenter, unshare and sh all exec: the pid is the command's own."""
    return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--uts", "sh", "-c",
            'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"',
            hostname, str(hosts_file)]


def start_cluster(procs: Procs, root: Path, net: Network | None = None) -> SlurmCluster:
    """One node on this machine, or with `net` (made with hub_host=True) one
    node on each of its hosts."""
    missing = [d for d in (*DAEMONS, "nsenter", "unshare") if _find(d) is None]
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
    if net is None:
        node = socket.gethostname()
        try:
            socket.getaddrinfo(node, None)
        except OSError:
            pytest.skip(f"this machine's name {node} does not resolve: srun's node list names it")
        ctl, nodes = (node, "127.0.0.1"), [(node, "127.0.0.1")]
        client: list[str] = []
        on_node = {node: []}
    else:
        ctl = ("ctl", net.hub_addr())
        nodes = [(f"node{i}", net.addr(i)) for i in sorted(net.hosts)]
        hosts_file = root / "hosts"
        hosts_file.write_text("127.0.0.1 localhost\n" + "".join(
            f"{addr} {name}\n" for name, addr in [ctl, *nodes]))
        client = _on_host(net.hub, ctl[0], hosts_file)
        on_node = {f"node{i}": _on_host(ns, f"node{i}", hosts_file)
                   for i, ns in net.hosts.items()}
    for name, _ in nodes:
        (root / "spool" / name).mkdir()
    cpus = os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(_config(root, ctl, nodes, cpus))
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
    daemons.append(procs.spawn([*client, _find("slurmctld"), "-D", "-i", "-f", conf],
                               "slurmctld", env=env))
    for name, prefix in on_node.items():
        daemons.append(procs.spawn([*prefix, _find("slurmd"), "-D", "-f", conf],
                                   f"slurmd-{name}", env=env))
    cluster = SlurmCluster(root, conf, [name for name, _ in nodes], [addr for _, addr in nodes],
                           cpus, daemons, client)
    while True:
        try:
            states = cluster.command("sinfo", "-h", "-N", "-o", "%t", timeout=10).split()
            if states == ["idle"] * len(nodes):
                return cluster
        except (AssertionError, subprocess.TimeoutExpired):
            pass
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text()[-2000:] for p in (root / "log").glob("*.log"))
            pytest.fail(f"the SLURM nodes did not become idle\n{logs}")
        time.sleep(0.2)
