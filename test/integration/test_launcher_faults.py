"""elasticrun when workers fail, hang or fork, when the agent itself is
signalled or killed, and when its command line is wrong.

Every test checks the exit status, what is reported, and that no process
of the test is left: launchers and everything under them carry a marker
variable, and the `marker` fixture fails the test if any process with it
outlives the test (after a bounded wait). Where torchrun's behaviour is the
contract (the failure report), the same failure runs under torchrun too and
the two reports are compared line by line in structure.

Workers are launcher_fault_worker.py: plain Python, no torch import except
in the @record case.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from conftest import WORKERS
from launcher_fixtures import (
    ERROR_FILE_RE,
    PROBE,
    RUN_TIMEOUT_S,
    FailureBlock,
    FailureReport,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    marked_pids,
    parse_failure_report,
    report_width,
    shared_runs,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
    wait_for,
    wait_marked_gone,
)

FAULT = WORKERS / "launcher_fault_worker.py"
# Bounds a launcher that should end on its own promptly (a killed worker,
# a second SIGINT); far below the 600 s shutdown timeouts those tests set.
PROMPT_EXIT_S = 60


def start(procs, marker, launcher, flags, worker_args, directory: Path, name: str, **env):
    """Starts `launcher flags launcher_fault_worker.py --dir <state> args`;
    returns (proc, state dir)."""
    state = directory / "state"
    state.mkdir(parents=True)
    proc = procs.spawn(
        [launcher, *flags, FAULT, "--dir", state, *worker_args],
        name,
        env=launcher_env(marker, directory / "tmp", **env),
        cwd=directory,
    )
    return proc, state


def started_pids(state: Path, attempt: int = 0) -> dict[int, int]:
    out = {}
    for p in state.glob(f"started.rank*.attempt{attempt}"):
        out[int(re.search(r"rank(\d+)", p.name).group(1))] = int(p.read_text())
    return out


def wait_started(proc, state: Path, n: int, attempt: int = 0) -> dict[int, int]:
    return wait_for(
        lambda: (lambda s: s if len(s) == n else None)(started_pids(state, attempt)),
        f"{n} workers to start",
        proc=proc,
    )


def got(state: Path, sig: str) -> set[int]:
    return {int(re.search(r"rank(\d+)", p.name).group(1)) for p in state.glob(f"got-{sig}.rank*")}


# --- Failure reports, compared with torchrun's ------------------------------


def block_shape(b: FailureBlock) -> dict:
    """What must match between two launchers' reports of the same failure:
    everything but the time, the host and the pid (checked for shape)."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d", b.fields["time"].strip()), b.fields
    shape = {"rank": b.rank, "exitcode": b.exitcode, "signal": b.signal_suffix}
    # The whole line, spaces included: torchrun's ends "(pid: N) " for an
    # exit status and "(pid: N)  (SIGKILL)" for a signal.
    shape["exitcode line"] = re.sub(r"\(pid: \d+\)", "(pid: <pid>)", b.fields["exitcode"])
    error_file = b.fields["error_file"].strip()
    if error_file == "<N/A>":
        shape["error_file"] = error_file
    else:
        m = ERROR_FILE_RE.fullmatch(error_file)
        assert m, f"error_file {error_file!r} is not in torchrun's layout"
        assert int(m["lr"]) == b.rank[1], f"error_file {error_file} is not local rank {b.rank[1]}'s"
        shape["error_file"] = f"<attempt_{m['attempt']}/{m['lr']}/error.json>"
    shape["traceback"] = b.fields["traceback"].rstrip().replace(f"PID {b.pid}", "PID <pid>")
    return shape


def assert_report_like_torchrun(t: FailureReport, e: FailureReport):
    assert e.title == t.title
    for r in (t, e):
        assert r.width == report_width(r), f"width {r.width}, torchrun's rule gives {report_width(r)}"
    assert block_shape(e.root) == block_shape(t.root)


def run_pair(elasticrun, torchrun, flags, worker_args, workers, key):  # noqa: F811
    """A maker for shared_runs: the same failing job under both launchers;
    returns {launcher: (rc, stderr, report, state dir)}. Each launcher has
    its own TORCHELASTIC_ERROR_FILE, <state dir>/../agent-error.json."""

    def make(procs, marker, directory):
        out = {}
        for name, binary in (("torchrun", torchrun), ("elasticrun", elasticrun)):
            agent_error = directory / name / "agent-error.json"
            proc, state = start(procs, marker, binary, flags, worker_args, directory / name,
                                f"{name}-{key}", TORCHELASTIC_ERROR_FILE=str(agent_error))
            rc = proc.wait(RUN_TIMEOUT_S)
            assert len(started_pids(state)) == workers, proc.describe()
            out[name] = (rc, proc.stderr(), parse_failure_report(proc.stderr()), state)
        return out

    return make


FAILURES = {
    # Rank 1 exits 1 once all run; ranks 0 and 2 sleep and must be stopped.
    "exit1": (("--standalone", "--nproc-per-node", "3"),
              ("--fail-rank", "1", "--exit-code", "1", "--exit-on", "SIGTERM"), 3),
    "sigkill": (("--standalone", "--nproc-per-node", "2"),
                ("--sigkill-rank", "0", "--exit-on", "SIGTERM"), 2),
    "record": (("--standalone", "--nproc-per-node", "2"),
               ("--raise-rank", "1", "--exit-on", "SIGTERM"), 2),
    # Rank 0 exits 2; rank 1, told to stop, fails its own way (exit 3).
    "two-failures": (("--standalone", "--nproc-per-node", "2"),
                     ("--fail-rank", "0", "--exit-code", "2", "--sigterm-exit", "3"), 2),
}


@pytest.fixture(scope="module")
def failures(shared_runs, elasticrun, torchrun):  # noqa: F811
    def get(key):
        flags, worker_args, workers = FAILURES[key]
        return shared_runs.get(key, run_pair(elasticrun, torchrun, flags, worker_args, workers, key))

    return get


def test_a_worker_that_exits_1_fails_the_job_stops_the_others_and_is_the_root_cause(failures):
    runs = failures("exit1")
    for name, (rc, stderr, report, state) in runs.items():
        assert rc == 1, f"{name} exited {rc}\n{stderr[-3000:]}"
        assert got(state, "SIGTERM") == {0, 2}, f"{name}: the other workers were not sent SIGTERM"
        assert report.root.rank == (1, 1)
        assert report.root.exitcode == 1 and report.root.signal_suffix is None
        assert report.root.pid == started_pids(state)[1]
        assert "To enable traceback see" in report.root.fields["traceback"]
    assert_report_like_torchrun(runs["torchrun"][2], runs["elasticrun"][2])


def test_a_worker_killed_by_sigkill_is_reported_as_exitcode_minus_9(failures):
    runs = failures("sigkill")
    for name, (rc, stderr, report, state) in runs.items():
        assert rc == 1, f"{name} exited {rc}\n{stderr[-3000:]}"
        assert got(state, "SIGTERM") == {1}, f"{name}: rank 1 was not sent SIGTERM"
        root = report.root
        assert (root.rank, root.exitcode, root.signal_suffix) == ((0, 0), -9, "SIGKILL")
        assert root.pid == started_pids(state)[0]
        assert root.fields["traceback"].strip() == f"Signal 9 (SIGKILL) received by PID {root.pid}"
    assert_report_like_torchrun(runs["torchrun"][2], runs["elasticrun"][2])


def test_a_worker_that_raises_under_record_is_reported_with_its_error_file_and_traceback(failures):
    runs = failures("record")
    for name, (rc, stderr, report, state) in runs.items():
        assert rc == 1, f"{name} exited {rc}\n{stderr[-3000:]}"
        root = report.root
        assert (root.rank, root.exitcode) == ((1, 1), 1)
        error_file = Path(root.fields["error_file"].strip())
        assert error_file.is_file(), f"{name}: the report names {error_file}, which does not exist"
        written = json.loads(error_file.read_text())["message"]
        assert "ValueError: launcher fault worker: rank 1 raised on purpose" in written["message"]
        # The report shows the py_callstack of the file, indented by two.
        callstack = written["extraInfo"]["py_callstack"]
        assert root.fields["traceback"] == callstack.replace("\n", "\n  ")
        # ... and its time is the file's timestamp, in local time.
        stamp = time.localtime(int(written["extraInfo"]["timestamp"]))
        assert root.fields["time"].strip() == time.strftime("%Y-%m-%d_%H:%M:%S", stamp)
    assert_report_like_torchrun(runs["torchrun"][2], runs["elasticrun"][2])


def test_the_report_lists_every_failure_and_names_the_earliest_the_root_cause(failures):
    runs = failures("two-failures")
    for name, (rc, stderr, report, state) in runs.items():
        assert rc == 1, f"{name} exited {rc}\n{stderr[-3000:]}"
        assert (report.root.rank, report.root.exitcode) == ((0, 0), 2), name
        assert [(b.rank, b.exitcode) for b in report.failures] == [((1, 1), 3)], name
        assert report.failures[0].pid == started_pids(state)[1]
    t, e = runs["torchrun"][2], runs["elasticrun"][2]
    assert_report_like_torchrun(t, e)
    assert [block_shape(b) for b in e.failures] == [block_shape(b) for b in t.failures]


def agent_error_file(state: Path) -> dict:
    path = state.parent / "agent-error.json"
    assert path.is_file(), f"{path} was not written"
    return json.loads(path.read_text())


def test_the_agent_copies_the_root_causes_error_file_to_its_own_error_file(failures):
    runs = failures("record")
    for name, (_, _, report, state) in runs.items():
        worker_file = json.loads(Path(report.root.fields["error_file"].strip()).read_text())
        agent = agent_error_file(state)
        assert agent["message"]["message"] == worker_file["message"]["message"], name
        assert agent["message"]["extraInfo"] == worker_file["message"]["extraInfo"], name


# torchrun adds "errorCode": <the worker's exit status> to the copy.
def test_the_agents_error_file_carries_the_exit_code_as_torchruns_does(failures):
    runs = failures("record")
    assert agent_error_file(runs["torchrun"][3])["message"]["errorCode"] == 1
    assert agent_error_file(runs["elasticrun"][3])["message"].get("errorCode") == 1


# torchrun counts the workers it stopped with SIGTERM as failures too
# (exitcode -15 (SIGTERM), "Signal 15 (SIGTERM) received by PID ...").
@pytest.mark.parametrize("key", ["exit1", "sigkill"])
def test_the_report_lists_the_workers_stopped_after_the_failure_as_torchrun_does(failures, key):
    runs = failures(key)

    def others(report):
        return sorted((block_shape(b) for b in report.failures), key=lambda s: s["rank"])

    expected = others(runs["torchrun"][2])
    assert expected, "torchrun listed no other failures"
    assert others(runs["elasticrun"][2]) == expected


def test_the_report_names_the_host_as_torchrun_does(failures):
    runs = failures("exit1")
    assert runs["torchrun"][2].root.fields["host"].strip() == socket.getfqdn()
    assert runs["elasticrun"][2].root.fields["host"].strip() == socket.getfqdn()


# --- Workers that do not stop, or leave children ----------------------------


def test_a_worker_that_ignores_sigterm_is_killed_after_the_shutdown_timeout(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    # Every rank notes SIGTERM and carries on; rank 0 then fails. Only the
    # SIGKILL that follows --shutdown-timeout can end ranks 1 and 2.
    proc, state = start(
        procs, marker, elasticrun,
        ["--standalone", "--nproc-per-node", "3", "--shutdown-timeout", "2"],
        ["--note", "SIGTERM", "--fail-rank", "0", "--exit-code", "1"],
        tmp_path, "elasticrun",
    )
    rc = proc.wait(PROMPT_EXIT_S)
    assert rc == 1, proc.describe()
    assert got(state, "SIGTERM") == {1, 2}, "the surviving workers were not sent SIGTERM first"
    report = parse_failure_report(proc.stderr())
    assert report.root.rank == (0, 0) and report.root.exitcode == 1
    assert not wait_marked_gone(marker)


@pytest.mark.parametrize("outcome", ["succeeds", "fails"])
def test_a_grandchild_a_worker_leaves_behind_is_gone_after_the_run(
    procs, marker, elasticrun, tmp_path, outcome  # noqa: F811
):
    worker_args = ["--grandchild"] + (
        ["--succeed"] if outcome == "succeeds" else ["--fail-rank", "0", "--exit-on", "SIGTERM"]
    )
    proc, state = start(procs, marker, elasticrun, ["--standalone", "--nproc-per-node", "2"],
                        worker_args, tmp_path, "elasticrun")
    rc = proc.wait(RUN_TIMEOUT_S)
    assert rc == (0 if outcome == "succeeds" else 1), proc.describe()
    grandchildren = [int(p.read_text()) for p in state.glob("grandchild.rank*")]
    assert len(grandchildren) == 2, f"grandchildren recorded: {grandchildren}"
    left = wait_marked_gone(marker)
    assert not left, f"left after the run: {left}"


def test_killing_the_agent_with_sigkill_takes_its_workers_and_their_children_with_it(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    proc, state = start(procs, marker, elasticrun, ["--standalone", "--nproc-per-node", "2"],
                        ["--grandchild"], tmp_path, "elasticrun")
    workers = wait_started(proc, state, 2)
    grandchildren = wait_for(
        lambda: (lambda g: g if len(g) == 2 else None)(list(state.glob("grandchild.rank*"))),
        "the grandchildren to start", proc=proc,
    )
    running = set(marked_pids(marker))
    assert set(workers.values()) <= running
    assert {int(p.read_text()) for p in grandchildren} <= running
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(PROMPT_EXIT_S) == -signal.SIGKILL
    left = wait_marked_gone(marker)
    assert not left, f"still running after the agent was killed: {left}"


# --- Signals to the agent ---------------------------------------------------


def test_sigterm_to_the_agent_reaches_every_worker_and_the_agent_exits_143(
    procs, marker, elasticrun, torchrun, tmp_path  # noqa: F811
):
    """torchrun forwards the signal the same way but exits 1 (a SignalException
    traceback); elasticrun exits 128+15 by design. Neither prints a failure
    report. torchrun's status is checked too, to keep that comparison honest."""
    results = {}
    for name, binary in (("torchrun", torchrun), ("elasticrun", elasticrun)):
        proc, state = start(procs, marker, binary, ["--standalone", "--nproc-per-node", "2"],
                            ["--exit-on", "SIGTERM"], tmp_path / name, name)
        wait_started(proc, state, 2)
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(RUN_TIMEOUT_S)
        assert got(state, "SIGTERM") == {0, 1}, f"{name}: workers did not get SIGTERM\n{proc.describe()}"
        assert " FAILED\n" not in proc.stderr(), f"{name} printed a failure report"
        assert not wait_marked_gone(marker), f"{name} left processes behind"
        results[name] = rc
    assert results["elasticrun"] == 128 + signal.SIGTERM
    assert results["torchrun"] == 1, f"torchrun exited {results['torchrun']} (documented: 1)"


def test_a_sigterm_during_the_grace_of_a_sigusr1_reaches_the_workers_as_under_torchrun(
    procs, marker, elasticrun, torchrun, tmp_path  # noqa: F811
):
    """SLURM's warning then its end (--signal=B:USR1@60, then SIGTERM): the
    workers note the SIGUSR1 and train on; the SIGTERM that follows must
    reach them too (their chance to save), not wait for --shutdown-timeout's
    SIGKILL. torchrun passes it on; so do we, and say so."""
    for name, binary in (("torchrun", torchrun), ("elasticrun", elasticrun)):
        proc, state = start(procs, marker, binary,
                            ["--standalone", "--nproc-per-node", "2", "--signals-to-handle",
                             "SIGUSR1,SIGTERM", "--shutdown-timeout", "600"],
                            ["--note", "SIGUSR1", "--exit-on", "SIGTERM"], tmp_path / name, name)
        wait_started(proc, state, 2)
        os.kill(proc.pid, signal.SIGUSR1)
        # Handled before the SIGTERM is sent: two pending signals of the
        # agent would be taken in any order.
        wait_for(lambda: got(state, "SIGUSR1") == {0, 1}, f"{name}: the SIGUSR1 forwarded",
                 proc=proc)
        assert proc.popen.poll() is None, f"{name} exited on SIGUSR1\n{proc.describe()}"
        os.kill(proc.pid, signal.SIGTERM)
        wait_for(lambda: got(state, "SIGTERM") == {0, 1}, f"{name}: the SIGTERM forwarded",
                 timeout=PROMPT_EXIT_S, proc=proc)
        rc = proc.wait(PROMPT_EXIT_S)
        assert not wait_marked_gone(marker), f"{name} left processes behind"
        if name == "elasticrun":
            # The run ends with the first signal; the log names the second.
            assert rc == 128 + signal.SIGUSR1, proc.describe()
            assert "received SIGTERM while the workers stop after SIGUSR1: forwarding it" in \
                proc.stderr(), proc.describe()


def test_a_second_sigint_kills_the_workers_at_once(procs, marker, elasticrun, tmp_path):  # noqa: F811
    # The workers note SIGINT and keep running; the shutdown timeout is far
    # longer than this test waits, so only the second SIGINT can end them.
    proc, state = start(procs, marker, elasticrun,
                        ["--standalone", "--nproc-per-node", "2", "--shutdown-timeout", "600"],
                        ["--note", "SIGINT"], tmp_path, "elasticrun")
    wait_started(proc, state, 2)
    os.kill(proc.pid, signal.SIGINT)
    # The first SIGINT must have been handled before the second is sent, or
    # the kernel would merge the two.
    wait_for(lambda: got(state, "SIGINT") == {0, 1}, "both workers to get the first SIGINT",
             proc=proc)
    assert proc.popen.poll() is None, "the agent exited after one SIGINT\n" + proc.describe()
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(PROMPT_EXIT_S) == 128 + signal.SIGINT, proc.describe()
    assert not wait_marked_gone(marker)


# --- Restarts ---------------------------------------------------------------


def test_max_restarts_restarts_failed_workers_with_the_next_restart_count(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    # Rank 1 fails on attempts 0 and 1; attempt 2 succeeds.
    proc, state = start(procs, marker, elasticrun,
                        ["--standalone", "--nproc-per-node", "2", "--max-restarts", "2"],
                        ["--fail-rank", "1", "--fail-until-attempt", "2", "--exit-on", "SIGTERM"],
                        tmp_path, "elasticrun")
    rc = proc.wait(RUN_TIMEOUT_S)
    assert rc == 0, proc.describe()
    # started.rank<R>.attempt<A>: A is the TORCHELASTIC_RESTART_COUNT it saw.
    seen = sorted(p.name for p in state.glob("started.*"))
    assert seen == [f"started.rank{r}.attempt{a}" for r in (0, 1) for a in (0, 1, 2)]
    assert got(state, "SIGTERM") == {0}, "rank 0 was not stopped when rank 1 failed"
    assert " FAILED\n" not in proc.stderr()


def test_a_job_that_runs_out_of_restarts_reports_its_last_attempt(
    procs, marker, elasticrun, tmp_path  # noqa: F811
):
    proc, state = start(procs, marker, elasticrun,
                        ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1"],
                        ["--fail-rank", "0", "--exit-code", "5", "--exit-on", "SIGTERM"],
                        tmp_path, "elasticrun")
    rc = proc.wait(RUN_TIMEOUT_S)
    assert rc == 1, proc.describe()
    assert sorted(p.name for p in state.glob("started.rank0.*")) == [
        "started.rank0.attempt0", "started.rank0.attempt1"
    ]
    root = parse_failure_report(proc.stderr()).root
    assert (root.rank, root.exitcode) == ((0, 0), 5)
    assert root.pid == started_pids(state, attempt=1)[0], "the report is not of the last attempt"


# --- Bad command lines ------------------------------------------------------


INVALID = {
    "nnodes-min-above-max": (["--nnodes", "3:2", "{probe}"], "--nnodes"),
    "no-workers": (["--nproc-per-node", "0", "{probe}"], "--nproc-per-node"),
    "port-out-of-range": (["--master-port", "70000", "{probe}"], "70000"),
    "unknown-backend": (["--rdzv-backend", "bogus", "{probe}"], "bogus"),
    "missing-script": (["--standalone", "--nproc-per-node", "2"], "TRAINING_SCRIPT"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_an_invalid_command_line_exits_2_with_a_message_before_any_worker_starts(
    procs, marker, elasticrun, tmp_path, case  # noqa: F811
):
    args, mentions = INVALID[case]
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    proc = procs.spawn(
        [elasticrun, *[str(PROBE) if a == "{probe}" else a for a in args]],
        "elasticrun",
        env=launcher_env(marker, tmp_path / "tmp", LAUNCHER_PROBE_DIR=str(probe_dir)),
    )
    assert proc.wait(PROMPT_EXIT_S) == 2, proc.describe()
    assert mentions in proc.stderr(), proc.describe()
    assert "usage:" in proc.stderr()
    assert list(probe_dir.iterdir()) == [], "a worker ran"
    assert not list((tmp_path / "tmp").iterdir()), "the launcher made run directories"


def test_the_usage_message_after_an_error_ends_with_a_newline(procs, marker, elasticrun, tmp_path):  # noqa: F811
    proc = procs.spawn([elasticrun, "--nproc-per-node", "0", PROBE], "elasticrun",
                       env=launcher_env(marker, tmp_path / "tmp"))
    assert proc.wait(PROMPT_EXIT_S) == 2
    assert proc.stderr().endswith("\n"), repr(proc.stderr()[-80:])
