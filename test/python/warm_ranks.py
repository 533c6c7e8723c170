"""Rank processes for the SDK's tests, forked from an interpreter that has
imported torch already.

Every test here starts two to five rank processes, some several times, and
each fresh `python script.py` spent about 6 s of CPU importing torch, DDP's
torch._dynamo and DCP before its first line: most of this suite's CPU time,
on a CI machine of 2 CPUs that runs the integration suite beside it. A
multiprocessing forkserver imports them once; each rank is a fork of it
that runs the script as __main__ with its own argv, environment and output
files. That is what elasticrun's --warm-start does for real workers
(docs/warm-start.md), and what the script sees differs from a fresh
interpreter only in the modules it finds imported. The ranks are still
separate processes on a real gloo group; a kill, a signal and an exit
status are the process's own.

The forkserver starts with this process's environment, so torch is imported
with OMP_NUM_THREADS=1 as every rank sets it; nothing of elasticrun is
imported ahead, so the SDK reads each rank's own environment."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

_PRELOAD = ["torch", "torch._dynamo", "torch.distributed.checkpoint", "torch.nn.parallel"]
_context = None
PR_SET_PDEATHSIG = 1


def _forkserver():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


def _run_script(script: str, args: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked rank: what `python -u script args` would do."""
    # The forkserver exits with the test run; its ranks go with it instead
    # of living on in a collective that will never complete.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def open_for_writing(path: str) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    # One open file for both when they are merged: two would write over
    # each other from their own offsets.
    stdout_fd = open_for_writing(out)
    stderr_fd = stdout_fd if err == out else open_for_writing(err)
    for source, fd in ((stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(source, fd)
    for source in {stdout_fd, stderr_fd}:
        os.close(source)
    # Line by line, as -u would: a rank that is SIGKILLed keeps every line it printed.
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


class RankProcess:
    """The part of subprocess.Popen (text mode, output captured) the tests use."""

    def __init__(self, script: Path, args, env: dict[str, str], out: Path, err: Path):
        self._script, self._out, self._err = script, out, err
        self._process = _forkserver().Process(
            target=_run_script, args=(str(script), [str(a) for a in args], dict(env),
                                      str(self._out), str(self._err)))
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(str(self._script), timeout)
        return self._process.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._read(self._out), self._read(self._err)

    def kill(self) -> None:
        self._process.kill()

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return Path(path).read_text(errors="replace")
        except FileNotFoundError:
            return ""


def start(script: Path, args, env: dict[str, str], merge_into: Path | None = None) -> RankProcess:
    """Starts `script args` as a rank with exactly the environment `env`.
    Its stdout and stderr go to files beside the script, or both to
    `merge_into`."""
    if merge_into is not None:
        return RankProcess(script, args, env, merge_into, merge_into)
    fd, out = tempfile.mkstemp(prefix="rank-", suffix=".out", dir=Path(script).parent)
    os.close(fd)
    err = Path(out).with_suffix(".err")
    return RankProcess(script, args, env, Path(out), err)


def run(script: Path, args, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) of one rank."""
    rank = start(script, args, env)
    try:
        out, err = rank.communicate(timeout)
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait(30)
    return subprocess.CompletedProcess([sys.executable, str(script), *map(str, args)],
                                       rank.returncode, out, err)
