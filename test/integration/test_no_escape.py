"""Nothing a worker starts outlives its job, not even what leaves every
process group.

A worker's helper that calls setsid() (a daemonised data-loading server)
is out of the worker's process group and session, so signals to the
groups miss it. The worker here (setsid_helper_worker.py, plain Python)
starts a chain of two such helpers. For each ending of the job (the
workers exit 0, the agent gets SIGTERM, the agent is killed with SIGKILL),
cold and in --warm-start interpreters, every helper must be gone within a
few seconds of the agent, the job's cgroup directory too, and nothing else
of the test may be left (the marker fixture).

What makes it so: each attempt's workers run in a cgroup below a job cgroup
the agent makes, killed at the end of the attempt, and by the death watch
when the agent dies; where cgroup v2 cannot be written, the agent, a child
subreaper, kills the helpers once they are its orphans. Only the SIGKILL
ending needs the cgroup (the agent is gone, nobody inherits the orphans who
knows them): it is skipped where cgroup v2 is not writable, except under
CI, where that would hide a setup that no longer tests it. The other two
endings run a second time without the cgroup, to test the orphan sweep on
a machine that has one: the agent in a mount namespace of its own where
the cgroup2 mount is read-only (root only; skipped otherwise, except
under CI).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import WORKERS
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

WORKER = WORKERS / "setsid_helper_worker.py"
NPROC = 2
DEPTH = 2
# "Within a few seconds": a bound on the cleanup, not a measurement of it.
GONE_S = 5


def _own_cgroup_dir() -> tuple[Path | None, str]:
    """This process's cgroup v2 directory (the agent's parent: the agent's own
    cgroup), or None and why not. As the agent finds it (supervisor/cgroup.cpp)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as e:
        return None, f"cannot read /proc/self/cgroup: {e}"
    own = next((l[3:] for l in lines if l.startswith("0::")), None)
    if own is None:
        return None, "no cgroup v2 (/proc/self/cgroup has no 0:: line)"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if "-" not in f or f[f.index("-") + 1] != "cgroup2":
            continue
        root = f[3].replace("\\040", " ")
        point = f[4].replace("\\040", " ")
        if root == "/":
            rest = own
        elif own == root or own.startswith(root + "/"):
            rest = own[len(root):]
        else:
            continue
        return Path(point + rest.rstrip("/")), ""
    return None, f"no cgroup2 mount shows this process's cgroup {own}"


@functools.cache
def cgroup_v2_unwritable() -> str:
    """Why the agent cannot make the job's cgroup here; empty when it can.
    Tried the agent's way: make a cgroup and move a process into it."""
    own, why = _own_cgroup_dir()
    if own is None:
        return why
    probe = own / f"elasticrun-test-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as e:
        return f"cannot create a cgroup in {own}: {e.strerror}"
    try:
        moved = subprocess.run(["/bin/sh", "-c", f"echo 0 > '{probe}/cgroup.procs'"],
                               capture_output=True, text=True, timeout=60)
        if moved.returncode != 0:
            return f"cannot move a process into {probe}: {moved.stderr.strip()}"
    finally:
        probe.rmdir()
    return ""


def job_cgroups(agent_pid: int) -> list[Path]:
    own, _ = _own_cgroup_dir()
    return sorted(own.glob(f"elasticrun-{agent_pid}-*")) if own else []


def _cgroup2_mount_point() -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if "-" in f and f[f.index("-") + 1] == "cgroup2":
            return f[4].replace("\\040", " ")
    return None


def without_cgroup() -> list[str]:
    """A command prefix that runs the agent where it cannot make a cgroup:
    nothing where it cannot anyway, else a mount namespace of its own with
    the cgroup2 mount read-only (the bind flag: only this namespace's view
    changes). Skips where neither can be had, except under CI."""
    if cgroup_v2_unwritable():
        return []
    point = _cgroup2_mount_point()
    why = ""
    if os.geteuid() != 0:
        why = "a read-only cgroup2 view needs root (a mount namespace)"
    elif not shutil.which("unshare"):
        why = "unshare (util-linux) is not installed"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI is set, so the agent without a cgroup must be tested",
                        pytrace=False)
        pytest.skip(why)
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            f"mount -o remount,bind,ro '{point}' && exec \"$@\"", "sh"]


def start(procs, marker, elasticrun, tmp_path: Path, then: str, warm: bool,  # noqa: F811
          prefix: list[str] | None = None):
    state = tmp_path / "state"
    state.mkdir()
    flags = ["--standalone", "--nproc-per-node", str(NPROC)]
    if warm:
        # Warm interpreters that import nothing much: the point is their
        # adoption as workers, not torch.
        flags += ["--warm-start", "--warm-start-imports", "json"]
    proc = procs.spawn(
        [*(prefix or []), elasticrun, *flags,
         WORKER, "--dir", state, "--depth", str(DEPTH), "--then", then],
        "elasticrun",
        env=launcher_env(marker, tmp_path / "tmp"),
        cwd=tmp_path,
    )
    return proc, state


def wait_helpers(proc, state: Path) -> list[int]:
    """The helpers' pids once every worker has written its own (so every
    helper is up), each checked to have led a session of its own: out of
    reach of any signal to a worker's process group."""
    wait_for(lambda: len(list(state.glob("worker.rank*"))) == NPROC, "the workers' helpers",
             proc=proc)
    workers = {int(p.read_text()) for p in state.glob("worker.rank*")}
    helpers = []
    for p in sorted(state.glob("helper.rank*")):
        pid, sid, pgid = (int(x) for x in p.read_text().split())
        assert sid == pid and pgid == pid and pgid not in workers, p.read_text()
        helpers.append(pid)
    assert len(helpers) == NPROC * DEPTH, helpers
    return helpers


def assert_all_gone(proc, helpers: list[int], agent_pid: int):
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and (
        any(_running(p) for p in helpers) or job_cgroups(agent_pid)
    ):
        time.sleep(0.05)
    left = [p for p in helpers if _running(p)]
    assert not left, f"setsid'd helpers still running {GONE_S} s after the agent: {left}\n" + (
        proc.describe()
    )
    assert not job_cgroups(agent_pid), f"cgroups left: {job_cgroups(agent_pid)}"


def _running(pid: int) -> bool:
    """Alive and not a zombie (init may take its time to reap one)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def in_job_cgroup(pid: int, agent_pid: int) -> bool:
    line = next(l for l in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                if l.startswith("0::"))
    return f"/elasticrun-{agent_pid}-" in line and line.endswith("/attempt_0")


@pytest.fixture(params=["cold", "warm"])
def warm(request) -> bool:
    return request.param == "warm"


def test_setsid_helpers_are_gone_when_the_job_ends_normally(
    procs, marker, elasticrun, tmp_path, warm  # noqa: F811
):
    proc, state = start(procs, marker, elasticrun, tmp_path, "exit", warm)
    helpers = wait_helpers(proc, state)
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert_all_gone(proc, helpers, proc.pid)


def test_setsid_helpers_are_gone_when_the_agent_gets_sigterm(
    procs, marker, elasticrun, tmp_path, warm  # noqa: F811
):
    proc, state = start(procs, marker, elasticrun, tmp_path, "wait", warm)
    helpers = wait_helpers(proc, state)
    assert all(_running(p) for p in helpers), "a helper died before the agent was signalled"
    if not cgroup_v2_unwritable():
        assert all(in_job_cgroup(p, proc.pid) for p in helpers), proc.describe()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(RUN_TIMEOUT_S) == 128 + signal.SIGTERM, proc.describe()
    assert_all_gone(proc, helpers, proc.pid)


def test_setsid_helpers_are_gone_when_the_agent_is_killed_with_sigkill(
    procs, marker, elasticrun, tmp_path, warm  # noqa: F811
):
    why = cgroup_v2_unwritable()
    if why:
        reason = f"cgroup v2 is not writable here ({why}): only a job cgroup reaches them"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so this must be tested", pytrace=False)
        pytest.skip(reason)
    proc, state = start(procs, marker, elasticrun, tmp_path, "wait", warm)
    helpers = wait_helpers(proc, state)
    assert all(_running(p) for p in helpers), "a helper died before the agent was killed"
    assert all(in_job_cgroup(p, proc.pid) for p in helpers), proc.describe()
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(RUN_TIMEOUT_S) == -signal.SIGKILL
    assert_all_gone(proc, helpers, proc.pid)


NO_CGROUP_LINE = "workers run without a cgroup"


@pytest.mark.parametrize("ending", ["the job ends", "sigterm"])
def test_without_a_cgroup_setsid_helpers_are_gone_as_the_agents_orphans(
    procs, marker, elasticrun, tmp_path, warm, ending  # noqa: F811
):
    prefix = without_cgroup()
    then = "exit" if ending == "the job ends" else "wait"
    proc, state = start(procs, marker, elasticrun, tmp_path, then, warm, prefix)
    helpers = wait_helpers(proc, state)
    if ending == "sigterm":
        assert all(_running(p) for p in helpers), "a helper died before the agent was signalled"
        os.kill(proc.pid, signal.SIGTERM)
    rc = proc.wait(RUN_TIMEOUT_S)
    assert rc == (0 if ending == "the job ends" else 128 + signal.SIGTERM), proc.describe()
    assert NO_CGROUP_LINE in proc.stderr(), proc.describe()
    assert_all_gone(proc, helpers, proc.pid)
