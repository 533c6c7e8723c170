"""elasticrun gives its workers what torchrun gives them: the same
environment variables and the same command line, for the same flags.

Each scenario runs launcher_probe.py under PyTorch's torchrun and under
elasticrun, with the same flags and the same parent environment; every worker
writes down its environment and argv. The comparison covers torchrun's
variables, anything whose name starts with TORCH or PET_, and anything the
launcher added, changed or removed relative to the parent environment.
Values that are random by design (a free port, a uuid run id, temp
directory names) are compared by shape; everything else exactly.

A scenario runs once per module and several tests read its records:
torchrun imports torch (seconds per run), and a second run would only
repeat the first. Each scenario has its own directory.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import Procs
from launcher_fixtures import (
    LauncherPairs,
    ERROR_FILE_RE,
    PROBE,
    TORCHELASTIC_TMP_NAME_RE,
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    read_records,
    shared_runs,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
)

TORCHRUN_VARS = (
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
)

# Variables whose differences are deliberate or checked by a test of their
# own, so that the scenario comparisons stay about everything else.
# Ours, on top of torchrun's: every elasticrun worker can reach its agent's
# control block (progress for the health monitors, scale events) and be asked
# for its Python stacks (docs/health.md), and save to the node's memory tier
# and dataset cache (docs/memory-tier.md); torchrun's workers have none of them.
# test_health.py and test_memory_tier.py check what they point at.
KNOWN_DIFFERENT_VARS: set[str] = {
    "ELASTICRUN_CONTROL_FILE", "ELASTICRUN_STACK_FILE", "ELASTICRUN_STACK_SIGNAL",
    "ELASTICRUN_MEMORY_DIR", "ELASTICRUN_MEMORY_LIMIT", "ELASTICRUN_MEMORY_REPLICAS",
    "ELASTICRUN_DATA_CACHE_DIR", "ELASTICRUN_DATA_CACHE_LIMIT",
}

ABSENT = "<absent>"
UUID4_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Scenario:
    """One launch, described once for both launchers.

    flags: the launcher's flags. command: the training command; "{probe}" is
    the probe script, "{exe}" an executable copy of it (for --no-python).
    nodes: agents of a static job on 127.0.0.1 (each gets --nnodes,
    --node-rank, --master-addr and --master-port). env: extra parent
    variables (None removes one). master_port: add --master-port <free port>
    (a one-node static job). random_run_id: torchrun makes the run id a uuid4.
    """

    flags: tuple
    command: tuple
    nodes: int = 1
    env: tuple = ()
    module_pkg: bool = False
    master_port: bool = False
    random_run_id: bool = True
    workers: int = 2


SCENARIOS = {
    # Script arguments that look like launcher flags are the script's.
    "standalone": Scenario(
        ("--standalone", "--nproc-per-node", "2"),
        ("{probe}", "--nnodes", "4", "-x", "--max-restarts=3", "--standalone", "tail", "--", "z"),
    ),
    # No --standalone and no --master-port on one node: torchrun switches to
    # c10d on a free port and replaces --rdzv-id with a uuid.
    "role-restarts-rdzv-id": Scenario(
        ("--nproc-per-node", "3", "--role", "trainer", "--max-restarts", "2", "--rdzv-id", "myjob"),
        ("{probe}",),
        workers=3,
    ),
    # With --master-port the one-node job stays static and keeps the id.
    "static-one-node-rdzv-id": Scenario(
        ("--nproc-per-node", "2", "--rdzv-id", "myjob", "--master-addr", "127.0.0.1"),
        ("{probe}", "a"),
        master_port=True,
        random_run_id=False,
    ),
    "module": Scenario(
        ("--standalone", "--nproc-per-node", "2", "-m"),
        ("launcher_probe_pkg.probe", "--flag", "value"),
        module_pkg=True,
    ),
    "no-python": Scenario(
        ("--standalone", "--nproc-per-node", "2", "--no-python"),
        ("{exe}", "-u", "--flag"),
    ),
    "static-two-nodes": Scenario(
        ("--nproc-per-node", "2"),
        ("{probe}", "b"),
        nodes=2,
        random_run_id=False,
        workers=4,
    ),
    "omp-preset": Scenario(
        ("--standalone", "--nproc-per-node", "2"),
        ("{probe}",),
        env=(("OMP_NUM_THREADS", "7"), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")),
    ),
    # With one worker torchrun leaves OMP_NUM_THREADS unset.
    "omp-unset-one-worker": Scenario(
        ("--standalone", "--nproc-per-node", "1"),
        ("{probe}",),
        workers=1,
    ),
    # torchrun rewrites these arguments: a '--' right after the script goes,
    # and ${local_rank}, $local_rank and $$ are substituted.
    "argv-macros": Scenario(
        ("--standalone", "--nproc-per-node", "2"),
        ("{probe}", "--", "--rank=${local_rank}", "$local_rank", "a$$b", "$rank"),
    ),
    # PYTHON_EXEC picks the interpreter; torchrun's variables already in
    # the parent environment are replaced, not kept.
    "python-exec-and-stale-vars": Scenario(
        ("--standalone", "--nproc-per-node", "2"),
        ("{probe}",),
        env=(("PYTHON_EXEC", "/usr/bin/python3"), ("RANK", "99"), ("MASTER_PORT", "1"),
             ("WORLD_SIZE", "77"), ("TORCHELASTIC_RESTART_COUNT", "5"), ("LOCAL_RANK", "7")),
    ),
    # Flags from PET_<NAME>, and underscore spellings.
    "pet-env-and-underscores": Scenario(
        ("--standalone", "--max_restarts", "1"),
        ("{probe}",),
        env=(("PET_NPROC_PER_NODE", "3"),),
        workers=3,
    ),
    # Parent's list: worker i sees only entry i, and LOCAL_RANK=0.
    "virtual-local-rank": Scenario(
        ("--standalone", "--nproc-per-node", "2", "--virtual-local-rank"),
        ("{probe}",),
        env=(("CUDA_VISIBLE_DEVICES", "4,5"),),
    ),
}




@dataclass
class Run:
    launcher: str
    parent_env: dict
    records: dict  # (rank, attempt) -> probe record
    port: int | None
    tmpdir: Path
    stderr: str = ""
    workdir: Path = field(default=Path())


def _materialise(scenario: Scenario, workdir: Path) -> tuple[list[str], dict]:
    """The training command and the extra environment, with files made."""
    extra = dict(scenario.env)
    cmd = []
    for token in scenario.command:
        if token == "{probe}":
            cmd.append(str(PROBE))
        elif token == "{exe}":
            exe = workdir / "probe-exe"
            shutil.copy(PROBE, exe)
            exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            cmd.append(str(exe))
        else:
            cmd.append(token)
    if scenario.module_pkg:
        pkg = workdir / "pkgroot" / "launcher_probe_pkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        shutil.copy(PROBE, pkg / "probe.py")
        extra["PYTHONPATH"] = str(workdir / "pkgroot")
    return cmd, extra


def run_scenario(procs: Procs, marker: str, launcher: Path, name: str, scenario: Scenario,
                 workdir: Path) -> Run:
    workdir.mkdir(parents=True)
    probe_dir = workdir / "probe"
    probe_dir.mkdir()
    cmd, extra = _materialise(scenario, workdir)
    env = launcher_env(marker, workdir / "tmp", LAUNCHER_PROBE_DIR=str(probe_dir), **extra)
    port = free_port() if scenario.nodes > 1 or scenario.master_port else None
    agents = []
    for node in range(scenario.nodes):
        flags = list(scenario.flags)
        if scenario.nodes > 1:
            flags += ["--nnodes", str(scenario.nodes), "--node-rank", str(node),
                      "--master-addr", "127.0.0.1"]
        if port is not None:
            flags += ["--master-port", str(port)]
        agents.append(procs.spawn([launcher, *flags, *cmd], f"{name}-node{node}", env=env))
    stderr = ""
    for agent in agents:
        rc = agent.wait(RUN_TIMEOUT_S)
        assert rc == 0, f"{agent.describe()}"
        stderr += agent.stderr()
    records = read_records(probe_dir)
    assert len(records) == scenario.workers, (
        f"{name}: {len(records)} workers recorded, expected {scenario.workers}: {sorted(records)}\n"
        + "\n".join(a.describe() for a in agents)
    )
    return Run(name, env, records, port, workdir / "tmp", stderr, workdir)


@pytest.fixture(scope="module")
def pairs(shared_runs, elasticrun, torchrun):  # noqa: F811
    """Each scenario under both launchers, run once per module."""
    return LauncherPairs(shared_runs, elasticrun, torchrun, SCENARIOS, run_scenario)


# --- Comparison -------------------------------------------------------------


def compared_keys(record: dict, parent: dict) -> set[str]:
    env = record["env"]
    keys = set(TORCHRUN_VARS)
    keys |= {k for k in env if k.startswith(("TORCH", "PET_"))}
    keys |= {k for k in env if parent.get(k) != env[k]}  # added or changed
    keys |= {k for k in parent if k not in env}  # removed
    return keys - KNOWN_DIFFERENT_VARS


def normalise(run: Run, scenario: Scenario, rank: int, attempt: int) -> dict:
    """The worker's compared variables, with random values replaced by a
    description of their shape (after checking the shape)."""
    rec = run.records[(rank, attempt)]
    env = rec["env"]
    out = {k: env.get(k, ABSENT) for k in compared_keys(rec, run.parent_env)}
    where = f"{run.launcher} rank {rank}"

    port = out["MASTER_PORT"]
    if run.port is not None:
        assert port == str(run.port), f"{where}: MASTER_PORT {port}, the job's port is {run.port}"
        out["MASTER_PORT"] = "<the --master-port>"
    else:
        assert port.isdigit() and 0 < int(port) < 65536, f"{where}: MASTER_PORT {port!r}"
        out["MASTER_PORT"] = "<a port>"
        # c10d: torchrun's is socket.getfqdn(), which depends on the host;
        # test_a_standalone_master_addr_is_torchruns compares it.
        assert out["MASTER_ADDR"] not in ("", ABSENT), f"{where}: no MASTER_ADDR"
        out["MASTER_ADDR"] = "<this host>"

    run_id = out["TORCHELASTIC_RUN_ID"]
    if scenario.random_run_id:
        assert UUID4_RE.fullmatch(run_id), f"{where}: TORCHELASTIC_RUN_ID {run_id!r} is no uuid4"
        out["TORCHELASTIC_RUN_ID"] = "<uuid4>"

    err = out["TORCHELASTIC_ERROR_FILE"]
    m = ERROR_FILE_RE.fullmatch(err)
    assert m, f"{where}: TORCHELASTIC_ERROR_FILE {err!r} is not <tmp>/torchelastic_*/<runid>_*/attempt_N/L/error.json"
    real_local_rank = rank - int(env["GROUP_RANK"]) * int(env["LOCAL_WORLD_SIZE"])
    assert m["base"] == str(run.tmpdir), f"{where}: error file not under TMPDIR: {err}"
    assert m["runid"] == run_id, f"{where}: error file's run id {m['runid']} != {run_id}"
    assert m["attempt"] == env["TORCHELASTIC_RESTART_COUNT"], f"{where}: {err}"
    assert m["lr"] == str(real_local_rank), f"{where}: {err} is not local rank {real_local_rank}'s"
    assert Path(err).parent.is_dir(), f"{where}: the directory of {err} does not exist"
    out["TORCHELASTIC_ERROR_FILE"] = "<TMPDIR>/torchelastic_<rand>/<RUN_ID>_<rand>/attempt_<n>/<lr>/error.json"
    return out


def same_everywhere(run: Run, key: str) -> str:
    values = {r["env"].get(key) for r in run.records.values()}
    assert len(values) == 1, f"{run.launcher}: workers disagree on {key}: {values}"
    return values.pop()


def assert_same_env(name: str, pairs: LauncherPairs):
    scenario = SCENARIOS[name]
    t, e = pairs.get(name)
    assert sorted(t.records) == sorted(e.records)
    for run in (t, e):
        for key in ("MASTER_PORT", "TORCHELASTIC_RUN_ID"):
            same_everywhere(run, key)
    for rank, attempt in sorted(t.records):
        expected = normalise(t, scenario, rank, attempt)
        actual = normalise(e, scenario, rank, attempt)
        diff = {
            k: (expected.get(k, ABSENT), actual.get(k, ABSENT))
            for k in sorted(set(expected) | set(actual))
            if expected.get(k, ABSENT) != actual.get(k, ABSENT)
        }
        assert not diff, f"{name}, rank {rank}: (torchrun, elasticrun) differ: {diff}"


# --- Tests ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_workers_get_the_environment_torchrun_gives_them(pairs, name):
    assert_same_env(name, pairs)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_workers_get_the_command_line_torchrun_gives_them(pairs, name):
    t, e = pairs.get(name)

    def local(run: Run, value):
        # Files the scenario made (the module's package, the executable
        # probe) live in each launcher's own directory.
        if isinstance(value, list):
            return [local(run, v) for v in value]
        return value.replace(str(run.workdir), "<workdir>")

    def interpreter(path: str) -> str:
        # torchrun runs its own sys.executable, elasticrun the python3 (or
        # python) that PATH finds; in a venv those are two names of one
        # interpreter (.venv/bin/python and python3 link to the same file).
        return os.path.realpath(path) if os.path.basename(path).startswith("python") else path

    def normalized(run: Run, record: dict, field_: str):
        value = local(run, record[field_])
        if field_ == "executable":
            return interpreter(value)
        if field_ == "orig_argv" and value:
            return [interpreter(value[0])] + value[1:]
        return value

    for key in sorted(t.records):
        for field_ in ("argv", "orig_argv", "executable"):
            tv, ev = normalized(t, t.records[key], field_), normalized(e, e.records[key], field_)
            assert tv == ev, f"{name}, rank {key[0]}: {field_}: torchrun {tv} elasticrun {ev}"


def test_script_arguments_that_look_like_flags_reach_the_script_unchanged(pairs):
    _, e = pairs.get("standalone")
    assert e.records[(1, 0)]["argv"][1:] == [
        "--nnodes", "4", "-x", "--max-restarts=3", "--standalone", "tail", "--", "z"
    ]


def test_an_implicit_single_node_job_replaces_rdzv_id_with_a_uuid_and_a_static_one_keeps_it(pairs):
    for _, e in (pairs.get("role-restarts-rdzv-id"),):
        run_id = same_everywhere(e, "TORCHELASTIC_RUN_ID")
        assert UUID4_RE.fullmatch(run_id), run_id
        assert same_everywhere(e, "ROLE_NAME") == "trainer"
        assert same_everywhere(e, "TORCHELASTIC_MAX_RESTARTS") == "2"
    _, e = pairs.get("static-one-node-rdzv-id")
    assert same_everywhere(e, "TORCHELASTIC_RUN_ID") == "myjob"
    assert same_everywhere(e, "MASTER_ADDR") == "127.0.0.1"


@pytest.mark.xfail(
    condition=socket.getfqdn() != "localhost",
    strict=True,
    reason="elasticrun bug on this host: torchrun's c10d/standalone MASTER_ADDR is socket.getfqdn() "
    f"({socket.getfqdn()!r} here); elasticrun always gives 'localhost'",
)
def test_a_standalone_master_addr_is_torchruns(pairs):
    t, e = pairs.get("standalone")
    assert same_everywhere(t, "MASTER_ADDR") == socket.getfqdn()
    assert same_everywhere(e, "MASTER_ADDR") == same_everywhere(t, "MASTER_ADDR")


def test_a_static_two_node_job_numbers_ranks_by_node(pairs):
    _, e = pairs.get("static-two-nodes")
    for (rank, _), rec in e.records.items():
        env = rec["env"]
        assert (env["GROUP_RANK"], env["LOCAL_RANK"]) == (str(rank // 2), str(rank % 2))
        assert env["WORLD_SIZE"] == "4" and env["GROUP_WORLD_SIZE"] == "2"
        assert env["TORCHELASTIC_RUN_ID"] == "none"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"


def test_python_exec_chooses_the_interpreter_and_stale_launcher_variables_are_replaced(pairs):
    _, e = pairs.get("python-exec-and-stale-vars")
    for (rank, _), rec in e.records.items():
        assert rec["orig_argv"][:2] == ["/usr/bin/python3", "-u"]
        assert (rec["env"]["RANK"], rec["env"]["LOCAL_RANK"]) == (str(rank), str(rank))
        assert (rec["env"]["WORLD_SIZE"], rec["env"]["TORCHELASTIC_RESTART_COUNT"]) == ("2", "0")
        assert rec["env"]["MASTER_PORT"] != "1"


def test_virtual_local_rank_shows_each_worker_one_device_as_local_rank_zero(pairs):
    _, e = pairs.get("virtual-local-rank")
    for (rank, _), rec in e.records.items():
        assert rec["env"]["LOCAL_RANK"] == "0"
        assert rec["env"]["CUDA_VISIBLE_DEVICES"] == ["4", "5"][rank]


def test_each_worker_leads_its_own_process_group(pairs):
    t, e = pairs.get("standalone")
    for run in (t, e):
        for key, rec in run.records.items():
            assert rec["pgid"] == rec["pid"], f"{run.launcher} rank {key[0]}: pgid {rec['pgid']}"


def test_each_worker_leads_its_own_session_as_under_torchrun(pairs):
    t, e = pairs.get("standalone")
    for run in (t, e):
        for key, rec in run.records.items():
            assert rec["sid"] == rec["pid"], f"{run.launcher} rank {key[0]}: sid {rec['sid']}"


def test_workers_inherit_torchelastic_signals_to_handle(pairs):
    t, e = pairs.get("standalone")
    assert same_everywhere(t, "TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    assert same_everywhere(e, "TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def test_the_temp_directory_of_a_run_is_named_as_by_torchrun(pairs):
    t, e = pairs.get("standalone")
    for run in (t, e):
        for key, rec in run.records.items():
            name = Path(rec["env"]["TORCHELASTIC_ERROR_FILE"]).parents[3].name
            assert TORCHELASTIC_TMP_NAME_RE.fullmatch(name), f"{run.launcher} rank {key[0]}: {name}"


# argparse's REMAINDER quirk: a '--' right after the script is not the script's.
def test_a_double_dash_right_after_the_script_is_dropped_as_by_torchrun(pairs):
    t, e = pairs.get("argv-macros")
    assert t.records[(0, 0)]["argv"][1] != "--"
    for key, rec in e.records.items():
        assert "--" not in rec["argv"], f"rank {key[0]}: {rec['argv']}"


# string.Template.safe_substitute(local_rank=N) on every argument.
def test_script_arguments_get_torchruns_local_rank_substitution(pairs):
    t, e = pairs.get("argv-macros")
    assert t.records[(1, 0)]["argv"][-4:] == ["--rank=1", "1", "a$b", "$rank"]
    for key in sorted(t.records):
        assert e.records[key]["argv"][-4:] == t.records[key]["argv"][-4:]
