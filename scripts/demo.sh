#!/usr/bin/env bash
# The main job: builds elasticrun (release), starts `elasticctl store`, and
# shows PyTorch using it: a TCPStore client, then four gloo workers that
# rendezvous through it and all-reduce; then the same workers launched by
# `elasticrun --standalone`. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target elasticctl elasticrun
export PATH="$PWD/.venv/bin:$PATH"  # elasticrun runs workers with the venv's python3
exec .venv/bin/python examples/python/store_demo.py --elasticctl build/release/elasticctl \
  --elasticrun build/release/elasticrun "$@"
