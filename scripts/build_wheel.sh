#!/usr/bin/env bash
# Builds the wheel as `pip install .` does (pyproject.toml; scikit-build-core
# from the development venv, so nothing is fetched) into DIST, emptied
# first (default build/wheel/dist), compiling in build/wheel/build.
# CTest runs it as `wheel_build` when configured with ELASTICRUN_TEST_WHEEL
# (scripts/test.sh does), beside the integration suite.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${1:-build/wheel/dist}
rm -rf "$dist"
# Niced: beside the integration suite it takes only the CPU their waits
# leave, so that their training jobs run as they would alone.
nice -n 10 .venv/bin/python -m pip wheel . -q --no-build-isolation --no-deps --disable-pip-version-check \
  -w "$dist" -Cbuild-dir=build/wheel/build
