"""The wheel (`pip install .`, pyproject.toml) installed into a fresh venv, as
a user gets it: elasticrun and elasticctl on the venv's PATH, `import
elasticrun` from the venv, one version everywhere, binaries that need
nothing of this machine beyond the C and C++ runtimes (ldd), and a 2-worker
torch job launched by the venv's elasticrun called by its path, without
activating the venv.

$ELASTICRUN_WHEEL names the wheel, or a directory holding one (CTest's
`wheel` entry, which scripts/test.sh enables, builds it there first); unset,
these tests skip (except under CI). The fresh venv gets torch by a .pth line to
the development venv's site-packages, after its own: a second copy of
PyTorch would be a download of gigabytes, and what is tested is ours.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, WORKERS, elasticctl, project_version  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import RUN_TIMEOUT_S, launcher_env, marker, wait_for  # noqa: F401

HYPERPOD_SCRIPT = WORKERS / "hyperpod_style_train.py"

# What every Linux with a Python has: the C and C++ runtimes and the loader.
RUNTIME = re.compile(r"^(linux-vdso|ld-linux[-\w.]*|libc|libm|libmvec|libpthread|libdl|librt|"
                     r"libresolv|libstdc\+\+|libgcc_s)\.so")
# Writes what it saw to <dir>/rank<R>.
TRAIN = """\
import os, sys
import torch
import torch.distributed as dist
import elasticrun
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}"), "w") as f:
    f.write(f"sum {t.item():.0f} sdk {elasticrun.__file__} python {sys.executable}")
dist.destroy_process_group()
"""


def pip_install(venv: Path, wheel) -> None:
    """The development venv's pip installs `wheel` into `venv` (no index:
    the wheels need nothing else)."""
    subprocess.run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
                    "-q", "--no-index", "--no-deps", "--disable-pip-version-check", wheel],
                   check=True)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    wheel = os.environ.get("ELASTICRUN_WHEEL")
    if wheel and Path(wheel).is_dir():
        found = sorted(Path(wheel).glob("elasticrun-*.whl"))
        assert len(found) == 1, f"{wheel} should hold one elasticrun wheel: {found}"
        wheel = str(found[0])
    if not wheel:
        reason = "ELASTICRUN_WHEEL is not set (CTest's `wheel` entry builds the wheel and sets it)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so the wheel must be tested", pytrace=False)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", root], check=True)
    pip_install(root, wheel)
    (site_packages(root) / "zz_development_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def bare_env(marker, tmp: Path) -> dict:  # noqa: F811
    """No venv on PATH, no source tree on PYTHONPATH."""
    return launcher_env(marker, tmp, PATH="/usr/bin:/bin", PYTHONPATH=None)


def test_the_commands_and_the_sdk_come_from_the_fresh_venv_with_one_version(venv, tmp_path,
                                                                            marker):  # noqa: F811
    env = bare_env(marker, tmp_path)
    version = project_version()
    ctl = subprocess.run([venv / "bin" / "elasticctl", "--version"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert ctl.stdout.strip() == f"elasticctl {version}", ctl
    run = subprocess.run([venv / "bin" / "elasticrun", "--help"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and "usage: elasticrun" in run.stdout, run
    sdk = subprocess.run([venv / "bin" / "python", "-c",
                          "import elasticrun; print(elasticrun.__version__, elasticrun.__file__)"],
                         env=env, capture_output=True, text=True, timeout=60)
    got_version, where = sdk.stdout.split()
    assert got_version == version, sdk
    assert Path(where).is_relative_to(venv), sdk


def test_the_installed_binaries_need_only_the_c_and_cpp_runtimes_of_this_machine(venv):
    bundled = venv / "lib" / "elasticrun"
    for name in ("elasticrun", "elasticctl"):
        out = subprocess.run(["ldd", venv / "bin" / name], check=True, capture_output=True,
                             text=True).stdout
        assert "not found" not in out, out
        for line in out.splitlines():
            lib = line.split()[0]
            m = re.search(r"=> (\S+)", line)
            path = Path(os.path.normpath(m.group(1))) if m else None
            if RUNTIME.match(Path(lib).name):
                continue
            assert path is not None and path.is_relative_to(bundled), f"{name}: {line.strip()}"


def test_a_two_worker_torch_job_runs_from_the_venv_called_by_its_path(venv, tmp_path,
                                                                     marker):  # noqa: F811
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = bare_env(marker, tmp_path / "tmp")
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([venv / "bin" / "elasticrun", "--standalone", "--nproc-per-node", "2",
                           script, tmp_path], env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        seen = (tmp_path / f"rank{rank}").read_text()
        # The venv's own interpreter and SDK, though neither is on PATH.
        assert seen.startswith(f"sum 3 sdk {venv}"), seen
        assert seen.endswith(f"python {venv / 'bin' / 'python3'}"), seen


# --- hyperpodrun's scripts, unchanged (python/hyperpod_compat) ---------------


@pytest.fixture(scope="module")
def hyperpod_venv(venv, tmp_path_factory) -> Path:
    """The fresh venv with elasticrun-hyperpod installed too, built here
    (nothing is compiled: seconds)."""
    dist = tmp_path_factory.mktemp("hyperpod-wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "--disable-pip-version-check", "-w", dist,
                    REPO / "python" / "hyperpod_compat"], check=True, timeout=300)
    [wheel] = dist.glob("elasticrun_hyperpod-*.whl")
    pip_install(venv, wheel)
    return venv


def site_packages(venv: Path) -> Path:
    return Path(subprocess.run([venv / "bin" / "python", "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


def imported_from(venv: Path, tmp_path: Path, marker) -> str:  # noqa: F811
    out = subprocess.run(
        [venv / "bin" / "python", "-c",
         "import hyperpod_elastic_agent.elastic_event_handler as h; print(h.__file__)"],
        env=bare_env(marker, tmp_path), check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def test_the_hyperpod_module_comes_from_the_add_on_and_never_shadows_the_real_one(
        hyperpod_venv, tmp_path, marker):  # noqa: F811
    site = site_packages(hyperpod_venv)
    ours = imported_from(hyperpod_venv, tmp_path, marker)
    assert Path(ours).is_relative_to(site / "elasticrun_hyperpod"), ours
    # AWS's package installed beside it (a stand-in with its module names):
    # that one is imported, ours stays unused.
    real = site / "hyperpod_elastic_agent"
    real.mkdir()
    try:
        (real / "__init__.py").write_text("")
        (real / "elastic_event_handler.py").write_text("def elastic_event_detected():\n"
                                                       "    return False\n")
        assert imported_from(hyperpod_venv, tmp_path, marker) == str(
            real / "elastic_event_handler.py")
    finally:
        shutil.rmtree(real)


def test_a_hyperpod_style_script_runs_unchanged_under_hyperpodrun_and_resumes_after_a_grow(
        hyperpod_venv, procs, tmp_path, marker, store):  # noqa: F811
    """hyperpodrun (the add-on's name for the venv's elasticrun), a job of
    1..2 nodes: one node trains; a second joins; the script's
    elastic_event_detected() turns the scale event into a DCP save and a
    return; both nodes resume from it at world size 2 and finish."""
    steps = 150
    log = tmp_path / "train.jsonl"
    job = Job(procs, marker, hyperpod_venv / "bin" / "hyperpodrun", tmp_path, "1:2",
              f"127.0.0.1:{store}", run_id="hyperpod-style", worker=HYPERPOD_SCRIPT,
              worker_args=[tmp_path / "ckpt", log, str(steps)],
              env={"PYTHONPATH": None, "PATH": "/usr/bin:/bin",
                   "HYPERPOD_SIGNAL_COORDINATION": "distributed"})
    job.start_agent(1)
    wait_for(lambda: len(records(log, "step")) >= 5, "five steps at one node",
             timeout=GEN_TIMEOUT_S, proc=job.agents[1])
    job.start_agent(2)
    for n in (1, 2):
        assert job.agents[n].wait(GEN_TIMEOUT_S) == 0, job.agents[n].describe()
    [saved] = records(log, "saved")
    assert saved["world"] == 1
    later = [e for e in records(log, "step") if e["world"] == 2]
    assert min(e["step"] for e in later) == saved["step"], later[:2]
    # Every step once at each size: none lost, none trained twice.
    first = sorted(e["step"] for e in records(log, "step") if e["world"] == 1)
    assert first == list(range(saved["step"])), first
    for rank in (0, 1):
        mine = sorted(e["step"] for e in later if e["rank"] == rank)
        assert mine == list(range(saved["step"], steps)), (rank, mine[:3])
    assert sorted(e["rank"] for e in records(log, "done")) == [0, 1]


def records(log: Path, event: str) -> list[dict]:
    if not log.exists():
        return []
    text = log.read_text()
    return [e for e in (json.loads(l) for l in text[: text.rfind("\n") + 1].splitlines())
            if e["event"] == event]
