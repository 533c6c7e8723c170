"""elasticrun's worker logs are torchrun's: the same files under the log
directory, with the same content, and the same worker lines on the console
with the same prefixes, for the same --redirects/--tee/--local-ranks-filter/
--role/--log-dir/--duplicate-*-filters flags and prefix template.

Each scenario runs launcher_log_worker.py under PyTorch's torchrun and under
elasticrun with the same flags and parent environment. The worker prints
known lines, ending each with ";" so they can be found whatever glued to
them: torchrun prints a last line that has no newline without one, so the
next writer's output (another rank's prefix, its own log line) follows on
the same console line. elasticrun ends such a line with a newline on
purpose (docs/ARCHITECTURE.md, "Deliberate differences from torchrun");
consoles are therefore compared as worker lines, not as bytes.

Lines of different ranks arrive in no fixed order; the lines of one writer
(one prefix, or one rank's inherited stream) do. Consoles and the
filtered_*.log files are compared per writer, in order. Launchers' own log
lines (torchrun's "W1129 ...", ours "[2026-...] [agent] ...") are ignored.

A scenario runs once per module, each launcher once: torchrun imports torch
(seconds per run on a loaded machine), so scenarios combine flags.
"""

from __future__ import annotations

import re
import socket
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import WORKERS, Procs
from launcher_fixtures import (
    LauncherPairs,
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    shared_runs,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
)

LOG_WORKER = WORKERS / "launcher_log_worker.py"

# A template with every macro, a "$$" (one "$"), an unknown macro that
# safe_substitute leaves as it is, and a trailing space.
CUSTOM_TEMPLATE = "${role_name}/${rank}/${local_rank}@${hostname}|$$|${nope}> "


@dataclass(frozen=True)
class Scenario:
    """flags: the launcher's flags (--standalone and --nproc-per-node are
    added). log_dir: add --log-dir <workdir>/logs; without it logs go to a
    torchelastic_* directory under TMPDIR. template: the parent's
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE. fail_rank: that rank writes an
    error file and exits 1. role: what --role says (the prefix's role)."""

    flags: tuple
    workers: int = 2
    log_dir: bool = True
    template: str | None = None
    fail_rank: int | None = None
    role: str = "default"


SCENARIOS = {
    # Files only, nothing of the workers on the console; the failing rank's
    # error file is where torchrun's is.
    "redirects-all-one-fails": Scenario(("--redirects", "3"), fail_rank=1),
    # Both streams of every rank to files and, prefixed, to the console;
    # tee'd lines with a filter word copied to filtered_std{out,err}.log.
    "tee-all-role-filters": Scenario(
        ("--tee", "3", "--role", "trainer", "--duplicate-stdout-filters", "apple,orange",
         "--duplicate-stderr-filters", "banana"),
        role="trainer",
    ),
    # Per-rank maps. Rank 0: both streams tee'd. Rank 1: stdout inherited
    # (on the console unprefixed), stderr to its file only. Rank 2: stdout
    # tee'd but filtered out (file only), stderr neither redirected nor
    # shown (/dev/null).
    "per-rank-maps-and-filter": Scenario(
        ("--redirects", "0:1,1:2", "--tee", "0:3,2:1", "--local-ranks-filter", "0,1"),
        workers=3,
    ),
    # Rank 0's tee'd streams reach only its files.
    "tee-all-ranks-filter": Scenario(("--tee", "3", "--local-ranks-filter", "1")),
    # No --log-dir: a torchelastic_* directory under TMPDIR, and the prefix
    # from TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
    "template-no-log-dir": Scenario(("--tee", "3"), log_dir=False, template=CUSTOM_TEMPLATE),
}


def raw_text(path: Path) -> str:
    """The file's text with its line ends as written: read_text() would turn
    each "\r" into "\n" and hide how a launcher ended its lines."""
    return path.read_bytes().decode("utf-8", errors="replace")


@dataclass
class Run:
    launcher: str
    rc: int
    stdout: str
    stderr: str
    log_root: Path  # --log-dir, else TMPDIR
    tmpdir: Path


def run_scenario(procs: Procs, marker: str, launcher: Path, name: str, scenario: Scenario,
                 workdir: Path) -> Run:
    workdir.mkdir(parents=True)
    extra = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": scenario.template}
    if scenario.fail_rank is not None:
        done_dir = workdir / "done"
        done_dir.mkdir()
        extra["LAUNCHER_LOG_WORKER_FAIL_RANK"] = str(scenario.fail_rank)
        extra["LAUNCHER_LOG_WORKER_DONE_DIR"] = str(done_dir)
    tmpdir = workdir / "tmp"
    env = launcher_env(marker, tmpdir, **extra)
    flags = ["--standalone", "--nproc-per-node", str(scenario.workers), *scenario.flags]
    log_root = tmpdir
    if scenario.log_dir:
        log_root = workdir / "logs"
        flags += ["--log-dir", str(log_root)]
    proc = procs.spawn([launcher, *flags, LOG_WORKER], name, env=env)
    rc = proc.wait(RUN_TIMEOUT_S)
    expected_rc = 0 if scenario.fail_rank is None else 1
    assert rc == expected_rc, f"{name}: exit {rc}, expected {expected_rc}\n{proc.describe()}"
    return Run(name, rc, raw_text(proc.stdout_path), raw_text(proc.stderr_path), log_root, tmpdir)


@pytest.fixture(scope="module")
def pairs(shared_runs, elasticrun, torchrun):  # noqa: F811
    """Each scenario under both launchers, run once per module."""
    return LauncherPairs(shared_runs, elasticrun, torchrun, SCENARIOS, run_scenario)


# --- Reading what a run left ------------------------------------------------

RUN_DIR_RE = re.compile(r"(?P<run_id>.+)_[a-z0-9_]{8}")
TMP_DIR_RE = re.compile(r"torchelastic_[a-z0-9_]{8}")


def _normalised_part(part: str) -> str:
    if TMP_DIR_RE.fullmatch(part):
        return "torchelastic_<rand>"
    m = RUN_DIR_RE.fullmatch(part)
    if m:
        # Standalone: the run id is a uuid4 of each launcher's own.
        return "<run_id>_<rand>"
    return part


def log_tree(root: Path) -> dict[str, Path]:
    """Every file and directory under root by its relative path, with the
    random parts of directory names replaced; directories end with "/"."""
    out = {}
    if not root.exists():
        return out
    for p in sorted(root.rglob("*")):
        rel = "/".join(_normalised_part(part) for part in p.relative_to(root).parts)
        key = rel + ("/" if p.is_dir() else "")
        assert key not in out, f"two paths normalise to {key}: {out[key]} and {p}"
        out[key] = p
    return out


# torchrun's logging ("W1129 14:13:06.873000 29948 torch/...") and ours
# ("[2026-11-29 14:13:06.873] [agent] [warning] ...").
LAUNCHER_LOG_RE = re.compile(r"[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ |\[\d{4}-\d\d-\d\d[ T]")
WORKER_TOKEN_RE = re.compile(r"lp:(out|err):r(\d+):")


def prefixes(scenario: Scenario) -> dict[int, str]:
    """The console prefix of each local rank (one node: rank == local rank)."""
    template = scenario.template or "[${role_name}${local_rank}]:"
    out = {}
    for lr in range(scenario.workers):
        p = template.replace("$$", "\0")
        for k, v in (("role_name", scenario.role), ("rank", str(lr)), ("local_rank", str(lr)),
                     ("hostname", socket.gethostname())):
            p = p.replace("${" + k + "}", v)
        out[lr] = p.replace("\0", "$")
    return out


def worker_lines(text: str, scenario: Scenario) -> dict[str, list[str]]:
    """The worker lines in a console (or a filtered_*.log), by writer, in
    order. A writer is a prefix, or "<unprefixed rN>" for rank N's inherited
    stream. A line is cut where a prefix or a launcher's log line starts in
    it (torchrun glues a last line without newline to what comes next)."""
    alternatives = sorted(prefixes(scenario).values(), key=len, reverse=True)
    prefix_re = re.compile("|".join(re.escape(p) for p in alternatives))
    segments: list[tuple[str | None, str]] = []
    for line in text.split("\n"):
        starts = list(prefix_re.finditer(line))
        head = line[: starts[0].start()] if starts else line
        segments.append((None, head))
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
            body = line[m.end() : end]
            glued = LAUNCHER_LOG_RE.search(body)
            if glued:
                body = body[: glued.start()]
            segments.append((m.group(0), body))
    out: dict[str, list[str]] = defaultdict(list)
    for prefix, body in segments:
        if prefix is not None:
            out[prefix].append(body)
            continue
        token = WORKER_TOKEN_RE.search(body)
        if token and not LAUNCHER_LOG_RE.match(body):
            out[f"<unprefixed r{token.group(2)}>"].append(body)
    return dict(out)


# --- Tests ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_log_directory_holds_the_files_torchrun_creates(pairs, name):
    t, e = pairs.get(name)
    for root in ("log_root", "tmpdir"):
        expected = sorted(log_tree(getattr(t, root)))
        actual = sorted(log_tree(getattr(e, root)))
        assert actual == expected, f"{name}: under {root}: torchrun {expected}, elasticrun {actual}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_log_file_holds_what_torchrun_writes_there(pairs, name):
    t, e = pairs.get(name)
    scenario = SCENARIOS[name]
    t_files, e_files = log_tree(t.log_root), log_tree(e.log_root)
    compared = 0
    for rel, path in t_files.items():
        if rel.endswith("/") or rel not in e_files:
            continue  # the layout test reports missing files
        compared += 1
        if Path(rel).name.startswith("filtered_"):
            # Lines of several ranks, in no fixed order between ranks.
            expected = worker_lines(raw_text(path), scenario)
            actual = worker_lines(raw_text(e_files[rel]), scenario)
        else:
            expected, actual = path.read_bytes(), e_files[rel].read_bytes()
        assert actual == expected, f"{name}: {rel}: torchrun {expected!r}\nelasticrun {actual!r}"
    assert compared or not t_files, f"{name}: no file compared"


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_the_console_shows_the_worker_lines_torchrun_shows(pairs, name, stream):
    t, e = pairs.get(name)
    scenario = SCENARIOS[name]
    expected = worker_lines(getattr(t, stream), scenario)
    actual = worker_lines(getattr(e, stream), scenario)
    assert actual == expected, (
        f"{name}: {stream} by writer:\ntorchrun   {expected}\nelasticrun {actual}"
    )


# --- What the comparisons above rest on ----------------------------------


def test_the_worker_prints_lines_torchrun_reads_back_as_the_tests_expect(pairs):
    """Guards the comparisons against passing vacuously: torchrun's console
    and files hold what the scenarios are meant to show."""
    t, _ = pairs.get("tee-all-role-filters")
    out = worker_lines(t.stdout, SCENARIOS["tee-all-role-filters"])
    assert sorted(out) == ["[trainer0]:", "[trainer1]:"]
    assert out["[trainer1]:"][0] == "lp:out:r1:1 hello;"
    assert "" in out["[trainer1]:"], "the empty line is shown, prefixed"
    assert out["[trainer1]:"][-1] == "lp:out:r1:9 tail without newline, apple;"
    filtered = log_tree(t.log_root)["<run_id>_<rand>/attempt_0/filtered_stdout.log"]
    assert worker_lines(raw_text(filtered), SCENARIOS["tee-all-role-filters"])["[trainer0]:"] == [
        "lp:out:r0:2 an apple a day;",
        "lp:out:r0:4 orange juice, café ✓;",
        "lp:out:r0:6 progress 2/2, orange;",
        "lp:out:r0:9 tail without newline, apple;",
    ]


def test_a_failing_rank_leaves_its_error_file_where_torchrun_does(pairs):
    t, e = pairs.get("redirects-all-one-fails")
    for run in (t, e):
        tree = log_tree(run.log_root)
        assert "<run_id>_<rand>/attempt_0/1/error.json" in tree, f"{run.launcher}: {sorted(tree)}"
        assert "<run_id>_<rand>/attempt_0/0/error.json" not in tree, f"{run.launcher}: {sorted(tree)}"


def test_the_custom_prefix_names_the_host_as_torchrun_does(pairs):
    t, e = pairs.get("template-no-log-dir")
    prefix = f"default/1/1@{socket.gethostname()}|$|${{nope}}> "
    for run in (t, e):
        out = worker_lines(run.stdout, SCENARIOS["template-no-log-dir"])
        assert out.get(prefix, [])[:1] == ["lp:out:r1:1 hello;"], f"{run.launcher}:\n{run.stdout}"


# Deliberate difference: torchrun prints a last line without newline as it
# is, so the next console output continues that line.
def test_elasticrun_ends_a_last_line_without_newline_on_the_console(pairs):
    _, e = pairs.get("tee-all-role-filters")
    lines = e.stdout.split("\n")
    for rank in (0, 1):
        assert f"[trainer{rank}]:lp:out:r{rank}:9 tail without newline, apple;" in lines, e.stdout
