"""--warm-start: Python workers run in interpreters started ahead of time.

A worker started in a warm interpreter must see what a worker started cold
sees: the same environment, sys.argv, sys.orig_argv, __main__, sys.path[0],
signal state, descriptors, command line in ps, traceback and exit status.
The only difference allowed is the point of the feature: the modules of
--warm-start-imports (torch) are imported already. Restarts use the
interpreters warmed meanwhile; a dead idle interpreter means a cold start,
not a failure; and no interpreter outlives the agent, even one killed with
SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import WORKERS
from launcher_fixtures import (
    free_port,
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marked_pids,
    marker,  # noqa: F401 (fixture)
    shared_runs,  # noqa: F401 (fixture)
    wait_for,
)

PROBE = WORKERS / "warm_probe.py"
# Values that differ between any two runs of a job, warm or not.
PER_RUN_VARS = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "WARM_PROBE_DIR",
                "ELASTICRUN_CONTROL_FILE", "ELASTICRUN_STACK_FILE",
                # the agent's memory tier and dataset cache, and the space /dev/shm has free
                "ELASTICRUN_MEMORY_DIR", "ELASTICRUN_MEMORY_LIMIT",
                "ELASTICRUN_DATA_CACHE_DIR", "ELASTICRUN_DATA_CACHE_LIMIT"}


def read_probe(directory: Path) -> dict[tuple[int, int], dict]:
    out = {}
    for p in directory.glob("rank*.attempt*.json"):
        rank, attempt = p.stem.removeprefix("rank").split(".attempt")
        out[(int(rank), int(attempt))] = json.loads(p.read_text())
    return out


def command(mode: str, workdir: Path) -> tuple[list[str], Path]:
    """The launcher's script part for a mode, and the directory to run in."""
    if mode == "script":
        return [str(PROBE), "--lr", "3", "x${local_rank}"], workdir
    if mode == "module":
        pkg = workdir / "warm_probe_pkg"
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "probe.py").write_text(PROBE.read_text())
        return ["-m", "warm_probe_pkg.probe", "--lr", "3"], workdir
    assert mode == "run_path"
    return ["--run-path", str(PROBE), "--lr", "3"], workdir


def launch(procs, marker, elasticrun, name, workdir: Path, flags, script, **env):
    probe_dir = workdir / f"probe-{name}"
    probe_dir.mkdir(parents=True)
    e = launcher_env(marker, workdir / "tmp", WARM_PROBE_DIR=str(probe_dir), **env)
    proc = procs.spawn([elasticrun, "--standalone", *flags, *script], name, env=e, cwd=workdir)
    return proc, probe_dir


def run_pair(mode: str):
    """The same job cold and warm, in one directory; returns both probes' records."""

    def make(procs, marker, directory):
        script, cwd = command(mode, directory)
        out = {}
        for kind, extra in (("cold", []), ("warm", ["--warm-start"])):
            proc, probe_dir = launch(procs, marker, elasticrun_path(), f"{mode}-{kind}", cwd,
                                     ["--nproc-per-node", "2", *extra], script)
            assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
            out[kind] = read_probe(probe_dir)
        return out

    return make


def elasticrun_path() -> Path:
    from conftest import _binary

    return _binary("ELASTICRUN", "build/dev/elasticrun")


@pytest.mark.parametrize("mode", ["script", "module", "run_path"])
def test_a_script_in_a_warm_interpreter_sees_what_a_freshly_started_one_sees(shared_runs, mode):
    runs = shared_runs.get(f"pair-{mode}", run_pair(mode))
    cold, warm = runs["cold"], runs["warm"]
    assert sorted(cold) == sorted(warm) == [(0, 0), (1, 0)]
    for key in sorted(cold):
        c, w = dict(cold[key]), dict(warm[key])
        assert c.pop("torch_imported") is False
        assert w.pop("torch_imported") is True, "the warm interpreter had not imported torch"
        for r in (c, w):
            assert r["pid"] == r["pgid"] == r["sid"], "a worker leads its own session"
            for k in ("pid", "pgid", "sid"):
                r.pop(k)
            for var in PER_RUN_VARS:
                r["env"].pop(var)
        diff = {k: (c[k], w[k]) for k in c if c[k] != w[k]}
        assert not diff, f"{mode}, rank {key[0]}: (cold, warm) differ: {diff}"


def test_a_failed_worker_restarts_in_an_interpreter_warmed_meanwhile(procs, marker, elasticrun,
                                                                       tmp_path):
    script, cwd = command("script", tmp_path)
    proc, probe_dir = launch(procs, marker, elasticrun, "restart", cwd,
                             ["--nproc-per-node", "2", "--max-restarts", "1", "--warm-start"],
                             script, FAIL_ON="1:0")
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    records = read_probe(probe_dir)
    assert sorted(records) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["torch_imported"] for r in records.values())
    pids = {r["pid"] for r in records.values()}
    assert len(pids) == 4, "each attempt's workers are new processes"
    assert "2 in warm interpreters" in proc.stderr().split("restart count 1")[1].splitlines()[0]


def test_an_uncaught_exception_is_reported_as_if_the_script_had_been_started_cold(
        procs, marker, elasticrun, tmp_path):
    script, cwd = command("script", tmp_path)
    outputs = {}
    for kind, extra in (("cold", []), ("warm", ["--warm-start"])):
        proc, _ = launch(procs, marker, elasticrun, f"raise-{kind}", cwd,
                         ["--nproc-per-node", "1", "--tee", "3", *extra], script, RAISE_ON="0:0")
        assert proc.wait(RUN_TIMEOUT_S) == 1, proc.describe()
        lines = [l for l in proc.stdout().splitlines() + proc.stderr().splitlines()
                 if l.startswith("[default0]:")]
        outputs[kind] = lines
        assert "exitcode  : 1" in proc.stderr() + proc.stdout(), proc.describe()
    assert any("Traceback (most recent call last):" in l for l in outputs["cold"])
    assert outputs["warm"] == outputs["cold"]


def idle_interpreters(marker: str) -> list[int]:
    """Warm interpreters not yet given a worker: their command line is still
    the bootstrap's."""
    out = []
    for pid in marked_pids(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"_elasticrun_warm_start" in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


def test_an_idle_interpreter_that_died_is_replaced_by_a_cold_start(procs, marker, elasticrun,
                                                                   tmp_path):
    script, cwd = command("script", tmp_path)
    hold = tmp_path / "go"
    proc, probe_dir = launch(procs, marker, elasticrun, "dead-idle", cwd,
                             ["--nproc-per-node", "1", "--max-restarts", "1", "--warm-start"],
                             script, FAIL_ON="0:0", HOLD_FILE=str(hold))
    # The worker runs its script (its interpreter is no longer idle), and the
    # interpreter for the restart is started a few seconds into attempt 0.
    wait_for(lambda: (probe_dir / "rank0.attempt0.holding").exists(), "the worker", proc=proc)
    idle = wait_for(lambda: idle_interpreters(marker), "an idle warm interpreter", proc=proc)
    for pid in idle:
        os.kill(pid, signal.SIGKILL)
    hold.touch()
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    records = read_probe(probe_dir)
    assert records[(0, 0)]["torch_imported"] is True
    assert records[(0, 1)]["torch_imported"] is False, "the restart should have started cold"


def test_no_interpreter_outlives_an_agent_killed_with_sigkill(procs, marker, elasticrun,
                                                              tmp_path):
    script, cwd = command("script", tmp_path)
    proc, probe_dir = launch(procs, marker, elasticrun, "kill-agent", cwd,
                             ["--nproc-per-node", "2", "--warm-start"], script,
                             HOLD_FILE=str(tmp_path / "never"))
    for rank in (0, 1):
        wait_for(lambda: (probe_dir / f"rank{rank}.attempt0.holding").exists(), "the workers",
                 proc=proc)
    wait_for(lambda: len(idle_interpreters(marker)) == 2, "two idle warm interpreters", proc=proc)
    # Workers and idle interpreters are alive now; the marker fixture checks
    # that all of them are gone after the agent is.
    assert len(marked_pids(marker)) >= 5  # the agent, its death watch, 2 workers, 2 idle
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(RUN_TIMEOUT_S)


def test_warm_start_imports_must_be_module_names_and_no_python_ignores_warm_start(
        elasticrun, tmp_path):
    env = launcher_env("cli", tmp_path / "tmp")
    bad = subprocess.run([elasticrun, "--standalone", "--warm-start", "--warm-start-imports",
                          "torch,not-a-module", str(PROBE)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2
    assert "'not-a-module' is not a Python module name" in bad.stderr
    ok = subprocess.run([elasticrun, "--standalone", "--no-python", "--warm-start", "/bin/true"],
                        env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "ignored with --no-python" in ok.stderr


def test_a_node_joins_an_elastic_job_once_its_interpreter_is_warm_and_every_worker_starts_warm(
        procs, marker, elasticrun, tmp_path):
    from elastic_job import Job

    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{free_port()}",
              extra=["--warm-start"])
    job.grow_from_two_to_three()
    job.check_generations()
    joiner = job.agents[3].stderr()
    ready = joiner.index("warm interpreter(s) ready")
    assert ready < joiner.index("started 1 worker(s)"), joiner
    for n in (1, 2, 3):
        starts = [l for l in job.agents[n].stderr().splitlines() if "started 1 worker(s)" in l]
        assert starts and all("1 in warm interpreters" in l for l in starts), (n, starts)
