#!/usr/bin/env bash
# Builds elasticrun under the sanitizers and runs every test: unit tests under
# ThreadSanitizer, then unit and integration tests (real PyTorch clients and
# gloo workers against the real binaries) under AddressSanitizer + UBSan.
# Installs what is missing first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

jobs=$(nproc)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
export ASAN_OPTIONS="detect_leaks=1 abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1"

cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target unit_tests
ctest --preset tsan -R '^unit$'

cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan
