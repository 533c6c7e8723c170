"""A worker for the log-rule tests of test_health.py: plain Python, no SDK,
no torch. It prints what --mode says on local rank 0 (or --rank), while the
others only wait, then exits 0 after --seconds:

  oom         prints a traceback ending in "CUDA out of memory" to stderr
  silent      prints nothing that a rule looks for
  batches     prints an "[Epoch 0 Batch N ... 'samples/sec': X]" line every
              0.1 s, X from --rates (comma-separated, the last repeats),
              and stops printing after --batches lines (it keeps running)
  checkpoints prints "The checkpoint is finalized. All shards is written."
              every 0.3 s, --batches times, then stops printing
  console     prints lines, a progress bar drawn with "\\r" and a last line
              without a newline, for comparing the console with and without
              rules
"""

from __future__ import annotations

import argparse
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--mode", required=True)
p.add_argument("--rank", type=int, default=0)
p.add_argument("--seconds", type=float, default=20)
p.add_argument("--rates", default="100")
p.add_argument("--batches", type=int, default=1000000)
args = p.parse_args()

if int(os.environ["LOCAL_RANK"]) != args.rank:
    time.sleep(args.seconds)
    sys.exit(0)

start = time.monotonic()
if args.mode == "oom":
    print("Experiment configuration: 2 ranks", flush=True)
    time.sleep(0.5)
    sys.stderr.write("Traceback (most recent call last):\n  File \"train.py\", line 3\n"
                     "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    sys.stderr.flush()
elif args.mode == "batches":
    rates = [float(r) for r in args.rates.split(",")]
    for n in range(args.batches):
        rate = rates[min(n, len(rates) - 1)]
        print(f"[Epoch 0 Batch {n} Step {n}] {{'training_loss_step': 0.5, "
              f"'samples/sec': {rate}}}", flush=True)
        time.sleep(0.1)
elif args.mode == "checkpoints":
    for n in range(args.batches):
        time.sleep(0.3)
        print("[rank 0] The checkpoint is finalized. All shards is written.", flush=True)
elif args.mode == "console":
    print("first line", flush=True)
    for i in range(5):
        sys.stdout.write(f"\rprogress {i * 25}%")
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stderr.write("a line on stderr\n")
    sys.stdout.write("no newline at the end")
    sys.stdout.flush()
    sys.exit(0)
while time.monotonic() - start < args.seconds:
    time.sleep(0.1)
