"""elasticrun as a container's entrypoint: PID 1 of a PID namespace
(`unshare --pid --fork`, what a container runtime does). The kernel gives
PID 1 every orphan of the namespace and delivers it only the signals it
handles: orphaned grandchildren of the workers must not pile up as
zombies, SIGTERM (`docker stop`, a pod's deletion) must reach the workers,
and the exit status must be the one torchrun gives (128 + the signal)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

# Each worker leaves an orphan that exits soon after (PID 1 inherits it),
# says it is ready, and on SIGTERM writes that it got it and exits.
WORKER = """\
import os, signal, sys, time
out, rank = os.environ["OUT"], os.environ["RANK"]
for _ in range(3):
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(0.3)
            os._exit(0)
        os._exit(0)
    os.wait()
def term(signum, frame):
    open(f"{out}/term.{rank}", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(f"{out}/ready.{rank}", "w").close()
while True:
    time.sleep(0.05)
"""


def stat(pid: int) -> tuple[str, int] | None:
    """(state, parent) of a process, by its pid here; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return state, int(ppid)


def children(pid: int) -> list[tuple[int, str]]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and (s := stat(int(d))) and s[1] == pid:
            out.append((int(d), s[0]))
    return out


def left_in_shm(since: float) -> list[str]:
    """What an agent that was PID 1 made in /dev/shm since `since` and left
    there: its memory tier, dataset cache, control block (named by its pid,
    1; no other test's agent is PID 1 at the same time)."""
    out = []
    for p in Path("/dev/shm").glob("elasticrun-*"):
        try:
            made = p.stat().st_ctime
        except FileNotFoundError:
            continue
        if made >= since - 0.01 and re.match(r"elasticrun-(mem-|data-)?1-", p.name):
            out.append(p.name)
    return out


@pytest.fixture
def script(tmp_path):
    """WORKER, where a PID namespace can be made."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a PID namespace needs root and unshare")
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def test_as_pid_1_it_reaps_orphans_forwards_sigterm_and_exits_as_torchrun(
        procs, marker, elasticrun, tmp_path, script):  # noqa: F811
    out = tmp_path / "out"
    out.mkdir()
    since = time.time()
    run = procs.spawn(["unshare", "--pid", "--fork", "--mount-proc", elasticrun, "--standalone",
                       "--nproc-per-node", "2", script], "pid1",
                      env=launcher_env(marker, tmp_path / "tmp", OUT=str(out)))
    wait_for(lambda: len(list(out.glob("ready.*"))) == 2, "both workers ready", proc=run)
    init = wait_for(lambda: next((p for p, _ in children(run.pid)), None), "PID 1", proc=run)
    # The orphans exit 0.3 s after their workers are ready; PID 1 reaps them.
    time.sleep(0.6)
    zombies = lambda: [p for p, state in children(init) if state == "Z"]  # noqa: E731
    deadline = time.monotonic() + 5
    while zombies() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not zombies(), f"orphans left as zombies of PID 1: {zombies()}"
    os.kill(init, signal.SIGTERM)  # docker stop
    assert run.wait(RUN_TIMEOUT_S) == 128 + signal.SIGTERM, run.describe()
    assert sorted(p.name for p in out.glob("term.*")) == ["term.0", "term.1"], run.describe()
    assert "SIGTERM" in run.stderr(), run.describe()
    assert not left_in_shm(since), left_in_shm(since)


def test_as_pid_1_a_sigterm_while_it_waits_in_the_rendezvous_ends_it(
        procs, marker, elasticrun, tmp_path, script):  # noqa: F811
    # The kernel drops PID 1's signals that have no handler: between
    # attempts (no workers yet, or a spare) the agent must still go on
    # `docker stop`, not at the runtime's SIGKILL.
    since = time.time()
    run = procs.spawn(["unshare", "--pid", "--fork", "--mount-proc", elasticrun, "--nnodes", "2",
                       "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                       f"127.0.0.1:{free_port()}", script], "pid1",
                      env=launcher_env(marker, tmp_path / "tmp", OUT=str(tmp_path)))
    wait_for(lambda: "hosting the rendezvous store" in run.stderr(),
             "the agent to wait for a second node", proc=run)
    init = wait_for(lambda: next((p for p, _ in children(run.pid)), None), "PID 1", proc=run)
    os.kill(init, signal.SIGTERM)
    assert run.wait(10) == 128 + signal.SIGTERM, run.describe()
    assert "signal 15 with no workers running" in run.stderr(), run.describe()
    # It exits from the signal's handler, and its death watch dies with the
    # namespace: the handler removed what the agent kept in /dev/shm.
    assert not left_in_shm(since), left_in_shm(since)
