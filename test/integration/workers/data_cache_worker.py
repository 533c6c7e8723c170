"""A worker for test_data_cache.py: takes a "decoded shard" through
elasticrun.data.cached() and appends to <out>/runs.jsonl whether it had to
make it, the cache directory and its pid. The first run of the job (no
<out>/died yet) SIGKILLs itself once the shard is cached; with --hold,
every run waits to be killed instead."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from elasticrun import data

p = argparse.ArgumentParser()
p.add_argument("out", type=Path)
p.add_argument("--hold", action="store_true")
args = p.parse_args()

made = []


def make():
    made.append(1)
    return {"tokens": np.arange(1 << 20, dtype=np.int32), "ids": np.arange(7, dtype=np.int64)}


shard = data.cached("train-0", make)
with open(args.out / "runs.jsonl", "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "made": bool(made),
                        "dir": os.environ.get(data.DATA_CACHE_DIR_ENV),
                        "mapped": isinstance(shard["tokens"], np.memmap),
                        "sum": int(shard["tokens"][:1000].sum())}) + "\n")
if args.hold:
    while True:
        time.sleep(1)
died = args.out / "died"
if not died.exists():
    died.touch()
    os.kill(os.getpid(), signal.SIGKILL)
