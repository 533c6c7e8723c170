#!/usr/bin/env bash
# The checks that need NVIDIA GPUs (test/gpu/gpu_checks.py says what they
# are): GPU health on the real NVML, and NCCL survivors released through
# the SDK. One command from the repo root:
#
#   bash test/gpu/run.sh
#
# Where `nvidia-smi -L` finds no GPU it prints why it skips and exits 0.
# Arguments go to gpu_checks.py (--backend gloo: a rehearsal on CPUs).
# Binaries: $ELASTICRUN and $ELASTICCTL, else build/release/, else
# build/dev/; where neither exists it builds them with
# `cmake --preset release` first. Python: $PYTHON, else .venv/bin/python
# (torch with CUDA: scripts/setup.sh). Bounded to 8 minutes in all; prints
# a PASS/FAIL summary, exits 0 when nothing failed, and leaves nothing
# running.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "test/gpu: SKIP: no nvidia-smi on this machine (no NVIDIA driver), so no GPU to test on"
  exit 0
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -eq 0 ]; then
  echo "test/gpu: SKIP: nvidia-smi -L finds no GPU on this machine"
  exit 0
fi

find_binary() {  # NAME: the first of build/release/NAME, build/dev/NAME that exists
  for dir in build/release build/dev; do
    if [ -x "$dir/$1" ]; then echo "$dir/$1"; return; fi
  done
}
elasticrun=${ELASTICRUN:-$(find_binary elasticrun)}
elasticctl=${ELASTICCTL:-$(find_binary elasticctl)}
if [ -z "$elasticrun" ] || [ -z "$elasticctl" ]; then
  echo "test/gpu: no build found: building elasticrun and elasticctl (cmake --preset release)"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target elasticrun elasticctl
  elasticrun=build/release/elasticrun
  elasticctl=build/release/elasticctl
fi
python=${PYTHON:-.venv/bin/python}
if [ ! -x "$python" ]; then
  echo "test/gpu: FAIL: no Python at $python (set PYTHON, or run scripts/setup.sh)"
  exit 1
fi

echo "test/gpu: $gpus GPU(s); $elasticrun; $python"
# The checks bound themselves; this bounds the checks (SIGTERM: they kill
# what they started and print the summary so far).
exec timeout --signal=TERM --kill-after=20 480 "$python" test/gpu/gpu_checks.py \
  --elasticrun "$(realpath "$elasticrun")" --elasticctl "$(realpath "$elasticctl")" \
  --python "$(realpath -s "$python")" --gpus "$gpus" "$@"
