"""elasticrun's command line against torchrun's own.

Each command line (and environment) goes to torchrun's real parser and run(),
with elastic_launch replaced by a recorder so that nothing is launched, and to
cli_dump, which prints what elasticrun's parser made of it. The settings must
agree: torchrun's LaunchConfig, its worker command, and the namespace after
run() has rewritten it (--standalone, single-node c10d, the master port).
Rejected command lines must be rejected by both.

cli_dump comes from $CLI_DUMP (CTest sets it), else build/dev/test/cli_dump.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed.run as torchrun
from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config

from conftest import _binary

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
# Variables either parser reads besides PET_*; cleared so the host cannot leak into a case.
OTHER_VARS = ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
CPUS = torch._utils.cpu_count()
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture(scope="session")
def cli_dump():
    return _binary("CLI_DUMP", "build/dev/test/cli_dump")


def clean_environ(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_") and k not in OTHER_VARS}
    env.update(extra)
    return env


def run_torchrun(argv: list[str], env: dict, tmp_path):
    """torchrun's namespace after run(), its LaunchConfig, command and args; or the exception."""
    recorded = {}

    class Recorder:
        def __init__(self, config, entrypoint):
            recorded["config"], recorded["cmd"] = config, entrypoint

        def __call__(self, *args):
            recorded["args"] = list(args)

    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("PET_") or name in OTHER_VARS:
                mp.delenv(name)
        for name, value in env.items():
            mp.setenv(name, value)
        # config_from_args sets OMP_NUM_THREADS in this process, and DefaultLogsSpecs
        # makes a temp directory when there is no --log-dir: keep both here.
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setattr(tempfile, "tempdir", str(tmp_path))
        mp.setattr(torchrun, "elastic_launch", Recorder)
        try:
            args = torchrun.get_args_parser().parse_args(argv)  # the env action reads PET_ here
            torchrun.run(args)
        except SystemExit as e:
            return e
        except Exception as e:  # torchrun reports bad values as assorted exceptions
            return e
    return args, recorded["config"], recorded["cmd"], recorded["args"]


def run_cli_dump(cli_dump, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    env = clean_environ({**env, "CLI_DUMP_CPU_COUNT": str(CPUS), "CLI_DUMP_GPU_COUNT": str(GPUS)})
    return subprocess.run(
        [str(cli_dump), *argv], env=env, capture_output=True, text=True, timeout=60
    )


def std_json(value) -> dict:
    if isinstance(value, dict):
        return {"default": 0, "ranks": {str(rank): int(std) for rank, std in value.items()}}
    return {"default": int(value), "ranks": {}}


def expected_settings(args, config, cmd, cmd_args) -> dict:
    """The cli_dump fields, computed from what torchrun decided."""
    specs = config.logs_specs
    user_conf = _parse_rendezvous_config(args.rdzv_conf)
    # torchrun adds "rank" (static) and a default "timeout" for the rendezvous itself.
    conf = {k: str(v) for k, v in config.rdzv_configs.items() if k in user_conf}
    module = bool(args.module) and not args.run_path
    no_python = bool(args.no_python) and not args.run_path
    ranks_filter = specs._local_ranks_filter
    return {
        "nnodes_min": config.min_nodes,
        "nnodes_max": config.max_nodes,
        "nproc_per_node": config.nproc_per_node,
        "rdzv_backend": config.rdzv_backend,
        "rdzv_endpoint": config.rdzv_endpoint,
        "rdzv_conf": conf,
        "standalone": bool(args.standalone),
        "max_restarts": config.max_restarts,
        "monitor_interval": config.monitor_interval,
        "start_method": config.start_method,
        "event_log_handler": config.event_log_handler,
        "role": config.role,
        "module": module,
        "no_python": no_python,
        "run_path": bool(args.run_path),
        "log_dir": args.log_dir,
        "redirects": std_json(specs._redirects),
        "tee": std_json(specs._tee),
        "log_line_prefix_template": config.log_line_prefix_template,
        "local_ranks_filter": sorted(ranks_filter) if ranks_filter else None,
        "duplicate_stdout_filters": list(config.duplicate_stdout_filters or []),
        "duplicate_stderr_filters": list(config.duplicate_stderr_filters or []),
        "node_rank": args.node_rank,
        "master_addr": args.master_addr,
        "master_port": args.master_port,
        "local_addr": config.local_addr,
        "logs_specs": args.logs_specs,
        "numa_binding": args.numa_binding,
        "signals_to_handle": [
            int(getattr(signal, name.strip())) for name in config.signals_to_handle.split(",")
        ],
        "shutdown_timeout": config.shutdown_timeout,
        "virtual_local_rank": bool(config.virtual_local_rank),
        "training_script": args.training_script,
        "training_script_args": list(args.training_script_args),
    }


def check_command(ours: dict, cmd, cmd_args) -> None:
    """torchrun's worker command is the one our fields describe."""
    script, script_args = ours["training_script"], ours["training_script_args"]
    if ours["run_path"]:
        assert callable(cmd) and cmd_args == [script, *script_args]
    elif ours["no_python"]:
        assert cmd == script and cmd_args == script_args
    else:
        assert cmd == os.getenv("PYTHON_EXEC", sys.executable)
        assert cmd_args == ["-u", *(["-m"] if ours["module"] else []), script, *script_args]


ACCEPTED = {
    "defaults": (["train.py"], {}),
    "standalone": (["--standalone", "--nproc-per-node", "4", "train.py", "--lr", "0.1"], {}),
    "static, two nodes": (
        ["--nnodes", "2", "--node_rank", "1", "--master-addr", "10.0.0.1", "--master_port=1234",
         "train.py"],
        {},
    ),
    "c10d, nnodes 1:4": (
        ["--nnodes=1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node1:29400",
         "--rdzv_id", "job7", "--rdzv-conf", "timeout=60, join_timeout = 5", "--max-restarts",
         "3", "train.py"],
        {},
    ),
    "module": (["-m", "pkg.train", "--epochs", "2"], {}),
    "no python, flags after the script": (
        ["--no-python", "./worker", "--nproc-per-node", "5", "-m", "x"], {}
    ),
    "tee and redirect maps": (
        ["--tee", "0:3,1:0", "-r", "2", "--log-dir", "{tmp}/logs", "--local-ranks-filter",
         "0,2", "train.py"],
        {},
    ),
    "PET_ fallback, the flag wins": (
        ["--max-restarts", "5", "train.py"],
        {"PET_NPROC_PER_NODE": "3", "PET_NNODES": "2", "PET_MAX_RESTARTS": "2",
         "PET_STANDALONE": "1", "PET_TEE": "0:1", "PET_ROLE": "trainer"},
    ),
    "supervision": (
        ["--nproc-per-node", "cpu", "--monitor-interval", "0.5", "--role", "trainer",
         "--signals-to-handle", "SIGTERM,SIGUSR1", "--shutdown-timeout", "10",
         "--virtual-local-rank", "--start-method", "fork", "train.py"],
        {},
    ),
    "logging extras": (
        ["--log-line-prefix-template", "${rank}: ", "--duplicate-stdout-filters", "a,,b,c",
         "--duplicate_stderr_filters=err", "--local-addr", "10.0.0.2", "train.py"],
        {},
    ),
    "torchrun's own variables": (
        ["train.py"],
        {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "7", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]"},
    ),
    "'--' before and after the script": (["--", "train.py", "--", "a"], {}),
    "'--' right after the script": (["train.py", "--", "--lr", "1"], {}),
    "run path over no python": (["--run-path", "--no-python", "/abs/train.py"], {}),
    "prefix and clustered short flags": (["--nproc_per_n", "2", "-mr3", "pkg.train"], {}),
    "nproc auto": (["--nproc-per-node", "auto", "train.py"], {}),
}

REJECTED = {
    "nnodes 3:2": ["--nnodes", "3:2", "train.py"],
    "nnodes 0": ["--nnodes", "0", "train.py"],
    "unknown start method": ["--start-method", "thread", "train.py"],
    "tee 4": ["--tee", "4", "train.py"],
    "rdzv-conf without a value": ["--rdzv-conf", "timeout=", "train.py"],
    "negative max restarts": ["--max-restarts", "-1", "train.py"],
    "unknown flag": ["--bogus", "train.py"],
    "no script": [],
    "a flag without its value": ["--nnodes"],
    "module without python": ["-m", "--no-python", "train.py"],
    "bad local ranks filter": ["--local-ranks-filter", "a", "train.py"],
    "master port not a number": ["--master-port", "x", "train.py"],
    "ambiguous prefix": ["--rdzv", "x", "train.py"],
    "a switch with a value": ["--standalone=1", "train.py"],
    "unknown numa binding": ["--numa-binding", "all", "train.py"],
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_elasticrun_reads_a_command_line_as_torchrun_does(case, cli_dump, tmp_path):
    argv, env = ACCEPTED[case]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    theirs = run_torchrun(argv, env, tmp_path)
    assert isinstance(theirs, tuple), f"torchrun rejected {argv}: {theirs!r}"
    args, config, cmd, cmd_args = theirs
    proc = run_cli_dump(cli_dump, argv, env)
    assert proc.returncode == 0, proc.stderr
    ours = json.loads(proc.stdout)

    expected = expected_settings(args, config, cmd, cmd_args)
    assert {k: ours[k] for k in expected} == expected
    if config.rdzv_endpoint == "localhost:0":  # a fresh random id on each side
        assert UUID4.match(config.run_id) and UUID4.match(ours["rdzv_id"])
    else:
        assert ours["rdzv_id"] == config.run_id
    check_command(ours, cmd, cmd_args)


@pytest.mark.parametrize("case", list(REJECTED))
def test_elasticrun_rejects_what_torchrun_rejects_with_exit_2(case, cli_dump, tmp_path):
    argv = REJECTED[case]
    theirs = run_torchrun(argv, {}, tmp_path)
    assert not isinstance(theirs, tuple), f"torchrun accepted {argv}"
    if isinstance(theirs, SystemExit):
        assert theirs.code == 2
    proc = run_cli_dump(cli_dump, argv, {})
    assert proc.returncode == 2, proc.stdout
    message = proc.stderr.splitlines()[0]
    assert message.startswith("cli_dump: ") and len(message) > len("cli_dump: ")


def test_nproc_gpu_is_accepted_exactly_when_torchrun_sees_a_gpu(cli_dump, tmp_path):
    argv = ["--nproc-per-node", "gpu", "train.py"]
    theirs = run_torchrun(argv, {}, tmp_path)
    proc = run_cli_dump(cli_dump, argv, {})
    assert isinstance(theirs, tuple) == (proc.returncode == 0), proc.stderr
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["nproc_per_node"] == theirs[1].nproc_per_node


def test_elasticrun_accepts_the_backends_torchrun_has_handlers_for(cli_dump):
    # torchrun looks a backend up only when it launches; both must know the same ones.
    from torch.distributed.elastic.rendezvous.api import rendezvous_handler_registry

    theirs = set(rendezvous_handler_registry._registry)
    for backend in sorted(theirs | {"zookeeper", "hyperpod"}):
        argv = ["--nnodes", "2", "--rdzv-backend", backend, "--rdzv-endpoint", "h:1", "train.py"]
        proc = run_cli_dump(cli_dump, argv, {})
        assert (proc.returncode == 0) == (backend in theirs), (backend, proc.stderr)


def test_help_exits_0_like_torchruns(cli_dump, tmp_path):
    theirs = run_torchrun(["-h"], {}, tmp_path)
    assert isinstance(theirs, SystemExit) and theirs.code == 0
    proc = run_cli_dump(cli_dump, ["-h"], {})
    assert proc.returncode == 0
    assert "torchrun-compatible:" in proc.stdout and "HyperPod-compatible" in proc.stdout
