"""A real etcd cluster on loopback for the suite: Debian's etcd-server
(scripts/setup.sh installs it), one process per member, every file under
the test's directory. Members keep etcd's default timing (heartbeat
100 ms, election 1 s): a loaded CI machine must not make them elect a new
leader while nobody was lost.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from launcher_fixtures import free_port, wait_for


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    proc: object  # conftest.Proc

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def status(self) -> dict | None:
        """etcd's maintenance status of this member, or None when it does not answer."""
        req = urllib.request.Request(f"http://{self.endpoint}/v3/maintenance/status",
                                     data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return json.load(r)
        except OSError:
            return None


class EtcdCluster:
    def __init__(self, procs, tmp_path: Path, members: int = 3):
        self.members: list[Member] = []
        ports = [(free_port(), free_port()) for _ in range(members)]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        for i, (client, peer) in enumerate(ports):
            name = f"m{i}"
            args = ["etcd", "--name", name, "--data-dir", tmp_path / f"etcd-{name}",
                    "--listen-client-urls", f"http://127.0.0.1:{client}",
                    "--advertise-client-urls", f"http://127.0.0.1:{client}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--logger", "zap"]
            self.members.append(Member(name, client, peer, procs.spawn(args, f"etcd-{name}")))
        wait_for(lambda: all(self._has_leader(m) for m in self.members), "etcd's leader",
                 timeout=60)

    @staticmethod
    def _has_leader(m: Member) -> bool:
        s = m.status()
        return bool(s and s.get("leader") and s.get("leader") != "0")

    @property
    def endpoints(self) -> str:
        """Every member, as --rdzv-endpoint takes them."""
        return ",".join(m.endpoint for m in self.members)

    def leader(self) -> Member:
        for m in self.members:
            s = m.status()
            if s and s.get("leader") == s.get("header", {}).get("member_id"):
                return m
        raise AssertionError("no etcd member says it leads")

    def kill(self, m: Member) -> None:
        m.proc.popen.send_signal(signal.SIGKILL)
        m.proc.wait(30)

    def stop(self) -> None:
        for m in self.members:
            if m.proc.popen.poll() is None:
                m.proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for m in self.members:
            m.proc.wait(max(1.0, deadline - time.monotonic()))
