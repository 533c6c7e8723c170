"""Helpers for the launcher suites: run `elasticrun` and PyTorch's `torchrun`
side by side, read what their workers recorded, parse the failure report,
and prove that no process of a test outlives it.

Workers of both launchers run in process groups of their own, so the
`procs` fixture (which watches the launcher's group) cannot see them. Every
launcher a test starts therefore gets a unique marker variable in its
environment, which its workers, their children and elasticrun's death watch
inherit; the `marker` fixture scans /proc for it when the test ends, kills
what it finds and fails the test. Workers that must be found while a test
runs use `marked_pids`.

Binaries: $ELASTICRUN (CTest sets it; by hand it defaults to
build/dev/elasticrun) and the venv's torchrun. Timeouts bound hangs only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, WORKERS, Proc, Procs, _binary

VENV_BIN = REPO / ".venv" / "bin"
TORCHRUN = VENV_BIN / "torchrun"
PROBE = WORKERS / "launcher_probe.py"

# A whole launcher run, torch imports included, on a loaded 2-core machine.
RUN_TIMEOUT_S = 180
# How long the processes of a finished (or killed) launcher may take to go.
GONE_TIMEOUT_S = 10

# torchrun's layout, <TMPDIR>/torchelastic_<random>/<run id>_<random>/attempt_<n>/<local rank>/error.json.
# Python's mkdtemp makes the random parts 8 of [a-z0-9_]; elasticrun's too.
TORCHELASTIC_TMP_NAME_RE = re.compile(r"torchelastic_[a-z0-9_]{8}")
ERROR_FILE_RE = re.compile(
    r"(?P<base>.+)/torchelastic_(?P<rand1>[a-z0-9_]{8})/(?P<runid>.+)_(?P<rand2>[a-z0-9_]{8})"
    r"/attempt_(?P<attempt>\d+)/(?P<lr>\d+)/error\.json"
)

MARKER_VAR = "ELASTICRUN_LAUNCHER_TEST_MARKER"

# What a parent environment must not carry into a parity run: the suite's own
# settings (conftest's venv_env) or a launcher's variables from an outer run.
_SCRUB_PREFIXES = ("TORCHELASTIC_", "PET_", "TORCH_ELASTIC_", "TORCH_NCCL_")
_SCRUB = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "OMP_NUM_THREADS", "PYTHON_EXEC", "PYTHONUNBUFFERED", "PYTHONPATH", "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "LOGLEVEL",
}


@pytest.fixture(scope="session")
def elasticrun() -> Path:
    return _binary("ELASTICRUN", "build/dev/elasticrun")


@pytest.fixture(scope="session")
def torchrun() -> Path:
    if not os.access(TORCHRUN, os.X_OK):
        pytest.fail(f"{TORCHRUN} is missing: the venv needs torch (scripts/setup.sh)", pytrace=False)
    return TORCHRUN


def free_port() -> int:
    """A port free on 127.0.0.1 now. Static jobs need a fixed port that every
    agent is told in advance, so port 0 cannot serve; the race with other
    programs is accepted."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_env(marker: str, tmpdir: Path, **extra: str) -> dict:
    """Environment for a launcher: ours without any launcher variables, the
    venv first on PATH (elasticrun runs the python3 that PATH finds), temp
    files (torchrun's and elasticrun's torchelastic_* dirs) under tmpdir, and
    the marker. Keys set to None in extra are removed."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _SCRUB and not k.startswith(_SCRUB_PREFIXES)
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    tmpdir.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmpdir)
    env[MARKER_VAR] = marker
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def marked_pids(marker: str) -> list[int]:
    """Live processes (zombies have no environment) that carry the marker."""
    needle = f"{MARKER_VAR}={marker}".encode()
    me = os.getpid()
    return [
        int(d)
        for d in os.listdir("/proc")
        if d.isdigit() and int(d) != me and _environ_has(int(d), needle)
    ]


def wait_marked_gone(marker: str, timeout: float = GONE_TIMEOUT_S) -> list[str]:
    """Polls until no process carries the marker; returns descriptions of the
    ones still there at the deadline (empty: all gone)."""
    deadline = time.monotonic() + timeout
    while True:
        left = marked_pids(marker)
        if not left or time.monotonic() > deadline:
            return [f"pid {p}: {_cmdline(p)}" for p in left]
        time.sleep(0.05)


@pytest.fixture
def marker(procs):
    """A unique marker value; at teardown every process that carries it must
    be gone (after a bounded wait), else it is killed and the test fails."""
    value = uuid.uuid4().hex
    yield value
    left = wait_marked_gone(value)
    for pid in marked_pids(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        pytest.fail("processes of the test left behind:\n  " + "\n  ".join(left), pytrace=False)


@dataclass
class _Failed:
    why: str


class SharedRuns:
    """Runs that several tests of a module read, each made at most once.

    torchrun imports torch (seconds a run); running the same job again for
    every assertion about it would only repeat it. Each run gets its own
    directory; every process of it must be gone when it has finished."""

    def __init__(self, root: Path):
        self.root = root
        self.procs = Procs(root)
        self.marker = uuid.uuid4().hex
        self._done: dict = {}

    def get(self, key: str, make):
        """make(procs, marker, directory) -> result, called once per key."""
        if key not in self._done:
            directory = self.root / key
            directory.mkdir(parents=True)
            # A run that failed fails every test that reads it, without
            # running again.
            self._done[key] = _Failed(f"the shared run {key!r} failed; see the first test that used it")
            result = make(self.procs, self.marker, directory)
            left = wait_marked_gone(self.marker)
            assert not left, f"{key}: processes left behind:\n  " + "\n  ".join(left)
            self._done[key] = result
        if isinstance(self._done[key], _Failed):
            pytest.fail(self._done[key].why, pytrace=False)
        return self._done[key]

    def close(self) -> list[str]:
        left = self.procs.reap_all() + wait_marked_gone(self.marker, timeout=0)
        for pid in marked_pids(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left


@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory):
    runs = SharedRuns(tmp_path_factory.mktemp("launcher-shared"))
    yield runs
    left = runs.close()
    assert not left, "processes left behind: " + "; ".join(left)


class LauncherPairs:
    """Each scenario of a module under torchrun and under elasticrun, each
    pair run once per module (on shared_runs). run(procs, marker, launcher,
    run_name, scenario, workdir) makes one run; get(name) returns
    (torchrun's, elasticrun's) for scenarios[name]."""

    def __init__(self, shared: SharedRuns, elasticrun: Path, torchrun: Path, scenarios: dict, run):
        self.shared = shared
        self.bins = {"torchrun": torchrun, "elasticrun": elasticrun}
        self.scenarios = scenarios
        self.run = run

    def get(self, name: str) -> tuple:
        def make(procs, marker, directory):
            return tuple(
                self.run(procs, marker, self.bins[l], f"{l}-{name}", self.scenarios[name],
                         directory / l)
                for l in ("torchrun", "elasticrun")
            )

        return self.shared.get(name, make)


def wait_for(predicate, what: str, timeout: float = RUN_TIMEOUT_S, proc: Proc | None = None,
             others: tuple = ()):
    """Polls predicate() until it returns something truthy; fails with `what`
    (and the output of proc and of the others) at the deadline or when proc
    exits first."""
    def described() -> str:
        return "".join(f"\n{p.describe()}" for p in (proc, *others) if p is not None)

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.popen.poll() is not None:
            value = predicate()
            if value:
                return value
            pytest.fail(f"{proc.name} exited before {what}{described()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}{described()}")
        time.sleep(0.05)


def read_records(probe_dir: Path) -> dict[tuple[int, int], dict]:
    """The probe's records by (rank, attempt)."""
    out = {}
    for p in probe_dir.glob("rank*.attempt*.json"):
        m = re.fullmatch(r"rank(\d+)\.attempt(\d+)\.json", p.name)
        if m:
            out[(int(m.group(1)), int(m.group(2)))] = json.loads(p.read_text())
    return out


# --- The failure report -----------------------------------------------------

_BLOCK_HEAD = re.compile(r"^\[(\d+)\]:$")
_FIELD = re.compile(r"^  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")


@dataclass
class FailureBlock:
    index: int
    fields: dict = field(default_factory=dict)
    lines: list = field(default_factory=list)

    @property
    def rank(self) -> tuple[int, int]:
        m = re.fullmatch(r"(\d+) \(local_rank: (\d+)\)", self.fields["rank"].strip())
        assert m, f"rank line {self.fields['rank']!r}"
        return int(m.group(1)), int(m.group(2))

    @property
    def exitcode(self) -> int:
        return int(self.fields["exitcode"].split()[0])

    @property
    def pid(self) -> int:
        m = re.search(r"\(pid: (\d+)\)", self.fields["exitcode"])
        assert m, f"exitcode line {self.fields['exitcode']!r}"
        return int(m.group(1))

    @property
    def signal_suffix(self) -> str | None:
        m = re.search(r"\(pid: \d+\)\s*\((SIG\w+)\)\s*$", self.fields["exitcode"])
        return m.group(1) if m else None


@dataclass
class FailureReport:
    width: int
    title: str
    failures: list
    root: FailureBlock
    no_other_failures: bool
    text: str


def _parse_blocks(lines: list[str]) -> list[FailureBlock]:
    blocks: list[FailureBlock] = []
    current_key = None
    for line in lines:
        m = _BLOCK_HEAD.match(line)
        if m:
            blocks.append(FailureBlock(int(m.group(1))))
            current_key = None
            continue
        assert blocks, f"report line outside a failure block: {line!r}"
        blocks[-1].lines.append(line)
        f = _FIELD.match(line)
        if f and (current_key != "traceback"):
            current_key = f.group(1)
            blocks[-1].fields[current_key] = f.group(2)
        else:
            # A traceback's continuation lines are indented under it.
            assert current_key == "traceback", f"unexpected report line {line!r}"
            blocks[-1].fields["traceback"] += "\n" + line
    return blocks


def parse_failure_report(stderr: str) -> FailureReport:
    """Finds torchrun's failure report in a launcher's stderr and parses it:

        <'=' * W>
        <script> FAILED
        <'-' * W>
        Failures:
        <blocks, or "  <NO_OTHER_FAILURES>">
        <'-' * W>
        Root Cause (first observed failure):
        <one block>
        <'=' * W>
    """
    lines = stderr.splitlines()
    starts = [i for i, l in enumerate(lines) if re.fullmatch(r"={10,}", l)]
    assert len(starts) >= 2, f"no failure report on stderr:\n{stderr[-3000:]}"
    begin = next(i for i in starts if i + 1 < len(lines) and lines[i + 1].endswith(" FAILED"))
    end = next(i for i in starts if i > begin)
    body = lines[begin : end + 1]
    width = len(body[0])
    assert body[-1] == "=" * width, f"report ends with {body[-1]!r}, not {width} '='"
    title = body[1]
    assert body[2] == "-" * width, f"line after the title is {body[2]!r}"
    assert body[3] == "Failures:", f"expected 'Failures:', got {body[3]!r}"
    sep = body.index("-" * width, 4)
    assert body[sep + 1] == "Root Cause (first observed failure):", body[sep + 1]
    failure_lines = body[4:sep]
    no_other = failure_lines == ["  <NO_OTHER_FAILURES>"]
    failures = [] if no_other else _parse_blocks(failure_lines)
    roots = _parse_blocks(body[sep + 2 : -1])
    assert len(roots) == 1, f"root cause has {len(roots)} blocks"
    return FailureReport(width, title, failures, roots[0], no_other, "\n".join(body))


def report_width(report: FailureReport) -> int:
    """torchrun's rule: min(60, max(len(title), longest line of any block))."""
    longest = len(report.title)
    for b in report.failures + [report.root]:
        lines = [f"[{b.index}]:"] + b.lines
        longest = max([longest] + [len(l) for l in lines])
    return min(60, longest)
