"""Which Python runs the workers, as a user relies on it: torchrun runs its
own interpreter (sys.executable) unless PYTHON_EXEC names another. A user
who calls a venv's launcher by its path, without activating the venv, gets
that venv's Python under torchrun; so under elasticrun installed in a venv
(here a venv made by the test, holding a copy of the binary). Outside one,
PATH decides."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
)

# Writes the interpreter it runs in, per rank.
SCRIPT = "import os, sys\nopen(os.environ['OUT'] + '/exe.' + os.environ['RANK'], 'w')" \
         ".write(sys.executable)\n"
# A PATH with no venv on it: Debian's python3, if any, is not ours.
BARE_PATH = "/usr/bin:/bin"


@pytest.fixture
def fake_venv(tmp_path, elasticrun):  # noqa: F811
    """<tmp>/venv: pyvenv.cfg, bin/python3 (the test's interpreter, by a
    link, as a venv has it) and bin/elasticrun (a copy: /proc/self/exe of a
    link would be the build tree's)."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    os.symlink(sys.executable, root / "bin" / "python3")
    shutil.copy2(elasticrun, root / "bin" / "elasticrun")
    return root


def run(procs, marker, launcher, tmp_path: Path, name: str, **env) -> dict[int, str]:  # noqa: F811
    out = tmp_path / name
    out.mkdir()
    script = out / "which.py"
    script.write_text(SCRIPT)
    proc = procs.spawn([launcher, "--standalone", "--nproc-per-node", "2", script], name,
                       env=launcher_env(marker, out / "tmp", **{"PATH": BARE_PATH, "OUT": str(out),
                                                                **env}))
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    return {int(p.name.split(".")[1]): p.read_text() for p in out.glob("exe.*")}


def test_a_launcher_called_by_its_path_runs_its_own_venvs_python_as_torchrun_does(
        procs, marker, torchrun, fake_venv, tmp_path):  # noqa: F811
    theirs = run(procs, marker, torchrun, tmp_path, "torchrun")
    assert set(theirs) == {0, 1}
    assert {Path(p).parent for p in theirs.values()} == {torchrun.parent}, theirs
    ours = run(procs, marker, fake_venv / "bin" / "elasticrun", tmp_path, "elasticrun")
    assert ours == {0: str(fake_venv / "bin" / "python3"), 1: str(fake_venv / "bin" / "python3")}


def test_python_exec_wins_over_the_venv_for_both_launchers(procs, marker, torchrun, fake_venv,
                                                           tmp_path):  # noqa: F811
    chosen = str(Path(sys.executable))
    theirs = run(procs, marker, torchrun, tmp_path, "torchrun", PYTHON_EXEC=chosen)
    ours = run(procs, marker, fake_venv / "bin" / "elasticrun", tmp_path, "elasticrun",
               PYTHON_EXEC=chosen)
    assert theirs == ours == {0: chosen, 1: chosen}


def test_outside_a_venv_the_python3_on_path_runs_the_workers(procs, marker, elasticrun,
                                                             tmp_path):  # noqa: F811
    shim = tmp_path / "shim"
    shim.mkdir()
    os.symlink(sys.executable, shim / "python3")
    got = run(procs, marker, elasticrun, tmp_path, "elasticrun", PATH=f"{shim}:{BARE_PATH}")
    assert got == {0: str(shim / "python3"), 1: str(shim / "python3")}
