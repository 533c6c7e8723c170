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
# Third-party caches that live until exit by design (fontconfig's).
export LSAN_OPTIONS="suppressions=$PWD/test/lsan.supp"

cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target unit_tests
ctest --preset tsan -R '^unit$'

# The C++ examples (examples/cpp) and the checkpoint format's test
# tool (ckpt_tool, over src/ckpt/torch) link libtorch, which is not built
# with sanitizers, so they get a plain release build of their own; the
# integration suite runs the examples under elasticrun and torchrun and
# drives the tool (test_checkpoint_cpp.py).
torch_cmake=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build/torch-examples -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_cmake" -DELASTICRUN_WITH_TORCH=ON \
  -DELASTICRUN_BUILD_TESTS=OFF -DELASTICRUN_BUILD_BENCH=OFF >/dev/null
cmake --build build/torch-examples -j "$jobs" --target allreduce_worker train_elastic ckpt_tool \
  elasticrun_sdk elasticrun_ckpt elasticrun_store
# The C++ SDK as `cmake --install` puts it (test_install.py builds a
# find_package consumer against it).
rm -rf build/install
cmake --install build/torch-examples --component sdk --prefix build/install >/dev/null
export ELASTICRUN_INSTALL_PREFIX=$PWD/build/install
export CPP_ALLREDUCE_WORKER=$PWD/build/torch-examples/examples/cpp/allreduce_worker
export CPP_TRAIN_ELASTIC=$PWD/build/torch-examples/examples/cpp/train_elastic
export CPP_CKPT_TOOL=$PWD/build/torch-examples/ckpt_tool

# ELASTICRUN_TEST_WHEEL: CTest builds the wheel as `pip install .` does
# (`wheel_build`, scripts/build_wheel.sh) and test_wheel.py installs it into
# a fresh venv (`wheel`).
cmake --preset asan -DELASTICRUN_TEST_WHEEL=ON >/dev/null
cmake --build --preset asan -j "$jobs"
# Three at a time: the integration suite is two halves (test/CMakeLists.txt:
# `integration` and `integration_jobs`, its training jobs), each of which
# spends much of its time waiting on workers (paced steps, rendezvous
# windows); the third slot takes the wheel's build and test, the unit tests
# and the SDK's, in the room the two leave.
ctest --preset asan -j 3
