"""`cmake --install` and find_package(elasticrun CONFIG), as a C++ worker's
project uses them: test/packaging/consumer, configured against the installed
tree only, builds, links elasticrun::sdk, ::ckpt and ::store, and runs (a
batch plan, a checkpoint saved and read back, a store round trip against
`elasticctl store`).

scripts/test.sh installs the SDK component of its release build and exports
$ELASTICRUN_INSTALL_PREFIX; unset, these tests skip (except under CI).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, elasticctl, project_version  # noqa: F401 (fixture)
from elastic_job import store  # noqa: F401 (fixture)

CONSUMER = REPO / "test" / "packaging" / "consumer"


@pytest.fixture(scope="module")
def prefix() -> Path:
    value = os.environ.get("ELASTICRUN_INSTALL_PREFIX")
    if not value:
        reason = ("ELASTICRUN_INSTALL_PREFIX is not set "
                  "(scripts/test.sh installs the SDK and sets it)")
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so the install must be tested", pytrace=False)
        pytest.skip(reason)
    return Path(value)


def test_the_installed_tree_holds_the_public_headers_libraries_and_package_config(prefix):
    headers = {p.name for p in (prefix / "include" / "elasticrun").iterdir()}
    public = {p.name for p in (REPO / "include" / "elasticrun").iterdir()}
    # Every public header but the libtorch adapter's, and the generated version.
    assert headers == (public - {"checkpoint_torch.hpp"}) | {"version.hpp"}, headers
    libdir = next(d for d in (prefix / "lib", prefix / "lib64") if d.is_dir())
    libs = {p.name for p in libdir.glob("libelasticrun_*.a")}
    assert {"libelasticrun_sdk.a", "libelasticrun_ckpt.a", "libelasticrun_store.a"} <= libs, libs
    assert (libdir / "cmake" / "elasticrun" / "elasticrunConfig.cmake").is_file()
    # Nothing of the source tree leaks into the installed targets.
    targets = (libdir / "cmake" / "elasticrun" / "elasticrunTargets.cmake").read_text()
    assert str(REPO) not in targets


def test_a_consumer_project_builds_against_the_installed_tree_and_runs(prefix, tmp_path,
                                                                       store):  # noqa: F811
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", CONSUMER, "-B", build, "-G", "Ninja",
                    f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, capture_output=True, timeout=300)
    made = subprocess.run(["cmake", "--build", build], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTICRUN_", "TORCHELASTIC"))}
    run = subprocess.run([build / "consumer", tmp_path / "ckpt", str(store)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    version = project_version()
    assert run.stdout.startswith(f"version {version} plan "), run.stdout
    assert run.stdout.rstrip().endswith("attached 0 step 7 sum 10 store here"), run.stdout
