"""Fixtures for the black-box suite: real binaries, real PyTorch.

Every process a test starts goes through the `procs` fixture, which puts it
in its own session (so its whole process group can be signalled and probed),
sends its stdout/stderr to files in the test's temp directory, and at
teardown kills whatever is still running and fails the test if anything was
left behind.

Binaries come from $ELASTICCTL and $STORE_OPS (CTest sets them); by hand they
default to build/dev/elasticctl and build/dev/test/store_ops.

Timeouts here only bound hangs; no test asserts how long anything takes.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"

# Generous: a loaded 2-core machine importing torch is slow, and a hang
# should fail the test, not the CI job.
STARTUP_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30

LISTEN_RE = re.compile(rb"listening on (\S+):(\d+)\s*$", re.MULTILINE)


def project_version() -> str:
    """The project's version (CMakeLists.txt's project()), as the Python SDK
    reads it in a source tree."""
    out = subprocess.run([sys.executable, "-c", "import elasticrun; print(elasticrun.__version__)"],
                         env={**os.environ, "PYTHONPATH": str(REPO / "python")},
                         check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def _binary(env_var: str, default: str) -> Path:
    path = Path(os.environ.get(env_var) or REPO / default)
    if not path.is_absolute():
        path = REPO / path
    if not os.access(path, os.X_OK):
        pytest.fail(f"{env_var}: {path} is not an executable; build it first", pytrace=False)
    return path


def optional_binary(env_var: str, built_by: str, what: str) -> Path:
    """A binary the sanitized build does not make (it links libtorch): the
    test skips when $env_var is unset, except under CI, where that is a
    broken build."""
    value = os.environ.get(env_var)
    if not value:
        reason = f"{env_var} is not set ({built_by} and sets it)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so {what} must be tested", pytrace=False)
        pytest.skip(reason)
    path = Path(value)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{env_var}: {path} is not an executable", pytrace=False)
    return path


@pytest.fixture(scope="session")
def elasticctl() -> Path:
    return _binary("ELASTICCTL", "build/dev/elasticctl")


@pytest.fixture(scope="session")
def store_ops_bin() -> Path:
    return _binary("STORE_OPS", "build/dev/test/store_ops")


def group_alive(pgid: int) -> bool:
    """True while any process of the process group still exists, zombies
    included, except orphans: a zombie whose parent is PID 1 has left
    nothing running and is init's to reap (a container's init may never:
    srun leaves one such child behind)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: still alive
        return True
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
                state, ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if int(pgrp) == pgid and not (state == "Z" and ppid == "1"):
            return True
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Proc:
    """A child process started in its own session, with output in files."""

    def __init__(self, popen: subprocess.Popen, name: str, stdout: Path, stderr: Path):
        self.popen = popen
        self.name = name
        self.stdout_path = stdout
        self.stderr_path = stderr

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def describe(self) -> str:
        return (
            f"{self.name} (pid {self.pid}, exit {self.popen.returncode})\n"
            f"--- stdout ---\n{self.stdout()[-4000:]}\n--- stderr ---\n{self.stderr()[-4000:]}"
        )

    def wait(self, timeout: float) -> int:
        """Exit status; kills the process and fails the test if it outlives timeout."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            pytest.fail(f"{self.name} did not exit within {timeout}s\n{self.describe()}")

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()

    def wait_for_listen_line(self, timeout: float = STARTUP_TIMEOUT_S) -> tuple[str, int]:
        """Polls stdout for `... listening on HOST:PORT`; returns (host, port)."""
        deadline = time.monotonic() + timeout
        while True:
            m = LISTEN_RE.search(self.stdout_path.read_bytes())
            if m:
                return m.group(1).decode(), int(m.group(2))
            if self.popen.poll() is not None:
                pytest.fail(f"{self.name} exited before it listened\n{self.describe()}")
            if time.monotonic() > deadline:
                self.kill_group()
                pytest.fail(f"{self.name} printed no listening line\n{self.describe()}")
            time.sleep(0.05)


class Procs:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.started: list[Proc] = []

    def spawn(self, args, name: str, env: dict | None = None, cwd: Path | None = None) -> Proc:
        index = len(self.started)
        out = self.tmp_path / f"{index:02d}-{name}.stdout"
        err = self.tmp_path / f"{index:02d}-{name}.stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            popen = subprocess.Popen(
                [str(a) for a in args],
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
                env=env,
                cwd=cwd or self.tmp_path,
                # Own session and process group: signals from the terminal do
                # not reach it, and killpg(pid, 0) tells whether any of its
                # descendants that kept the group survive.
                start_new_session=True,
            )
        proc = Proc(popen, name, out, err)
        self.started.append(proc)
        return proc

    def run(self, args, name: str, timeout: float, env: dict | None = None) -> Proc:
        """Runs a command to completion (killing it if it outlives timeout)."""
        proc = self.spawn(args, name, env=env)
        proc.wait(timeout)
        return proc

    def reap_all(self) -> list[str]:
        """Kills leftovers; returns a description of each process that was left."""
        left = []
        for proc in self.started:
            if proc.popen.poll() is None:
                left.append(f"{proc.name} (pid {proc.pid}) was still running")
            elif group_alive(proc.pid):
                left.append(f"a descendant of {proc.name} (pgid {proc.pid}) outlived it")
            proc.kill_group()
        return left


@pytest.fixture
def procs(tmp_path):
    registry = Procs(tmp_path)
    yield registry
    left = registry.reap_all()
    if left:
        pytest.fail("processes left behind: " + "; ".join(left), pytrace=False)


@dataclass
class Server:
    host: str
    port: int
    proc: Proc

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signals the server, waits for it, and checks nothing of it is left."""
        if self.proc.popen.poll() is None:
            os.kill(self.proc.pid, sig)
        rc = self.proc.wait(STOP_TIMEOUT_S)
        assert not pid_alive(self.proc.pid), f"{self.proc.name} pid {self.proc.pid} still exists"
        assert not group_alive(self.proc.pid), f"{self.proc.name} left processes in its group"
        return rc


def start_our_store(procs: Procs, elasticctl: Path) -> Server:
    proc = procs.spawn(
        [elasticctl, "store", "--host", "127.0.0.1", "--port", "0"], "elasticctl-store"
    )
    host, port = proc.wait_for_listen_line()
    assert host == "127.0.0.1"
    assert 0 < port < 65536
    return Server(host, port, proc)


@pytest.fixture
def our_store(procs, elasticctl):
    """`elasticctl store` on 127.0.0.1, an ephemeral port; stopped with SIGTERM."""
    server = start_our_store(procs, elasticctl)
    yield server
    if server.proc.popen.returncode is None:
        rc = server.stop(signal.SIGTERM)
        assert rc == 0, f"elasticctl store exited {rc} on SIGTERM\n{server.proc.describe()}"


def _torch_store(procs: Procs, python: str, name: str, env: dict):
    proc = procs.spawn([python, WORKERS / "torch_store_server.py"], name, env=env)
    host, port = proc.wait_for_listen_line()
    server = Server(host, port, proc)
    yield server
    rc = server.stop(signal.SIGTERM)
    assert rc == 0, f"{name} server exited {rc}\n{proc.describe()}"


@pytest.fixture
def torch_store(procs):
    """PyTorch's libuv TCPStore server (the venv's torch), alone in its own process."""
    yield from _torch_store(procs, sys.executable, "torch-store", venv_env())


LEGACY_PYTHON = "/usr/bin/python3"


def _no_legacy_torch(reason: str):
    # scripts/setup.sh installs Debian's python3-torch, so under CI (CI=true)
    # a missing PyTorch 1.x is a broken setup, not a reason to skip quietly.
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: scripts/setup.sh should have installed python3-torch)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def legacy_python() -> str:
    """Debian's /usr/bin/python3 with its torch 1.13; skips when it has no torch (fails under CI)."""
    try:
        out = subprocess.run(
            [LEGACY_PYTHON, "-c", "import torch.distributed as d; import torch; "
             "assert d.is_available(); print(torch.__version__)"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=legacy_env(),
        )
    except FileNotFoundError:
        _no_legacy_torch(f"{LEGACY_PYTHON} does not exist, so there is no PyTorch 1.x to test with")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        _no_legacy_torch(
            f"{LEGACY_PYTHON} cannot import torch.distributed (Debian's python3-torch): {last}"
        )
    version = out.stdout.strip()
    if not version.startswith("1."):
        _no_legacy_torch(f"{LEGACY_PYTHON} has torch {version}, not a 1.x release")
    return LEGACY_PYTHON


@pytest.fixture
def legacy_torch_store(procs, legacy_python):
    """PyTorch 1.13's own (poll-based) TCPStore server, in Debian's Python."""
    yield from _torch_store(procs, legacy_python, "torch1-store", legacy_env())


def venv_env(**extra: str) -> dict:
    """Environment for Python children: ours, plus extras, with torch kept quiet and on CPU."""
    env = dict(os.environ)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    env.update(extra)
    return env


def legacy_env(**extra: str) -> dict:
    """Like venv_env, minus anything that would point Debian's Python at the venv."""
    env = venv_env(**extra)
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(var, None)
    return env


VALIDATE, PING = 0, 13
VALIDATION_MAGIC = 0x3C85F7CE


def handshake(host: str, port: int, timeout: float = 30) -> socket.socket:
    """Connects and does what a PyTorch >= 2.5 client does first: VALIDATE, then
    PING with a nonce, and reads the echo. A reply proves the server's event
    loop is running (not just that the kernel accepted the connection).
    Returns the connected socket; the caller closes it."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        nonce = os.getpid() & 0xFFFFFFFF
        sock.sendall(struct.pack("<BIBI", VALIDATE, VALIDATION_MAGIC, PING, nonce))
        echo = b""
        while len(echo) < 4:
            chunk = sock.recv(4 - len(echo))
            assert chunk, "store closed the connection during the handshake"
            echo += chunk
        assert struct.unpack("<I", echo)[0] == nonce, f"PING echoed {echo!r}"
    except BaseException:
        sock.close()
        raise
    return sock
