"""A small network of hosts on one machine, made of Linux network namespaces.

A "hub" namespace holds a bridge; each host is a namespace of its own with
one interface, `eth0`, a veth whose other end (`h<i>` in the hub) is a port
of the bridge, and the address <subnet>.<i>/24. Nothing touches the root
namespace's interfaces. Names carry a random suffix and each network a random
10.x.y.0/24, so parallel runs cannot collide (the hub is not connected to the
root namespace anyway).

A program runs on host i through `ip netns exec`, which execs it in place:
the pid the test gets is the program's own, so process groups, signals and
the marker scan work as for any other process of this machine.

Creating namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); `probe()`
says why it cannot be done here.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid

IP = "ip"
# The name of every host's interface (the same in each namespace): workers'
# gloo must be told it (GLOO_SOCKET_IFNAME), because this machine's hostname
# resolves to 127.0.0.1 and gloo would otherwise advertise loopback to its
# peers on other hosts.
IFNAME = "eth0"
PREFIX = "ertest"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([IP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=30)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return out


def probe() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"{PREFIX}-probe-{uuid.uuid4().hex[:8]}"
    try:
        out = _ip("netns", "add", name, check=False)
    except FileNotFoundError:
        return f"{IP} (iproute2) is not installed"
    if out.returncode != 0:
        return f"ip netns add failed: {out.stderr.strip()}"
    try:
        # What a Network needs besides the namespaces (a kernel without
        # bridge or veth support fails here).
        for args in (("link", "add", "br0", "type", "bridge"),
                     ("link", "add", "v0", "type", "veth", "peer", "name", "v1")):
            r = _ip("-n", name, *args, check=False)
            if r.returncode != 0:
                return f"ip {' '.join(args)} failed: {r.stderr.strip()}"
    finally:
        _ip("netns", "del", name, check=False)
    return None


class Network:
    """Hosts 1..n on one bridge. Use as a context manager, or call close().
    With `hub_host`, the hub itself is a host too: the bridge gets the
    address hub_addr() and programs run in the hub reach every host."""

    HUB = 254  # the hub's host number, when it is one

    def __init__(self, hosts: int, hub_host: bool = False):
        suffix = uuid.uuid4().hex[:8]
        self.subnet = f"10.{random.randint(100, 254)}.{random.randint(0, 255)}"
        self.hub = f"{PREFIX}-hub-{suffix}"
        self.hosts = {i: f"{PREFIX}-h{i}-{suffix}" for i in range(1, hosts + 1)}
        self._made: list[str] = []
        self.hub_host = hub_host
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _add(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        if self.hub_host:
            _ip("-n", self.hub, "addr", "add", f"{self.hub_addr()}/24", "dev", "br0")
        for i, ns in self.hosts.items():
            self._add(ns)
            _ip("-n", self.hub, "link", "add", self.hub_port(i), "type", "veth",
                "peer", "name", IFNAME, "netns", ns)
            _ip("-n", self.hub, "link", "set", self.hub_port(i), "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", IFNAME)
            # No IPv6 link-local address: gloo takes the interface's first
            # address, which must be the IPv4 one its peers can reach.
            _ip("-n", ns, "link", "set", IFNAME, "addrgenmode", "none")
            _ip("-n", ns, "link", "set", IFNAME, "up")

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{i}"

    def hub_addr(self) -> str:
        assert self.hub_host, "Network(hub_host=True) gives the hub an address"
        return self.addr(self.HUB)

    def hub_port(self, i: int) -> str:
        return f"h{i}"

    def exec_args(self, i: int) -> list[str]:
        """Prefix for a command line that runs it on host i."""
        return [IP, "netns", "exec", self.hosts[i]]

    def cut(self, i: int) -> None:
        """Pulls host i's cable: its bridge port goes down. The host is not
        told (its own interface merely loses carrier); nothing it sends
        arrives, nothing reaches it, no connection gets a reset."""
        _ip("-n", self.hub, "link", "set", self.hub_port(i), "down")

    def kill_all(self, i: int) -> list[int]:
        """SIGKILLs every process inside host i's namespace; returns their pids."""
        pids = self.pids().get(self.hosts[i], [])
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def pids(self) -> dict[str, list[int]]:
        """Processes inside each namespace (the hub included)."""
        out = {}
        for ns in self._made:
            r = _ip("netns", "pids", ns, check=False)
            out[ns] = [int(p) for p in r.stdout.split()] if r.returncode == 0 else []
        return out

    def close(self) -> list[str]:
        """Kills whatever still runs inside, deletes every namespace made;
        returns what had to be killed (the suite's own fixtures should have
        ended it first). Raises if a namespace cannot be deleted."""
        killed = []
        for ns, pids in self.pids().items():
            for pid in pids:
                killed.append(f"pid {pid} in {ns}")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if killed:
            deadline = time.monotonic() + 10
            while any(self.pids().values()) and time.monotonic() < deadline:
                time.sleep(0.05)
        errors = []
        # Hosts first: deleting a host's namespace destroys its veth pair.
        for ns in reversed(self._made):
            r = _ip("netns", "del", ns, check=False)
            if r.returncode != 0:
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
        self._made.clear()
        if errors:
            raise RuntimeError("; ".join(errors))
        return killed

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
