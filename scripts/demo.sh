#!/usr/bin/env bash
# The main job: an elastic training run on this machine. Builds elasticrun
# (release) and runs examples/python/elastic_demo.py: three local agents
# (127.0.0.1-3) train examples/python/train_elastic.py over gloo on the
# store the first agent hosts, through a start at 2 nodes, a third node
# joining, `elasticctl release --nodes 1` and a worker killed with SIGKILL;
# then it checks that the global batch stayed constant and every sample of
# each epoch was used exactly once, and plots world size and loss
# (build/demo/elastic_demo.png). Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target elasticctl elasticrun
exec .venv/bin/python examples/python/elastic_demo.py --elasticrun build/release/elasticrun \
  --elasticctl build/release/elasticctl --out build/demo "$@"
