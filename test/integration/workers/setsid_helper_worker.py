"""A worker whose helper leaves every process group, for the no-escape tests.

It forks a helper that calls os.setsid() (as a daemonised data-loading
server does) and sleeps forever; with --depth N the helper forks the next
one, which does the same, N helpers in a chain. No torch import.

  --dir D        helper K of rank R writes D/helper.rank<R>.<K> ("PID SID PGID")
                 once it leads a session of its own; then the worker writes
                 D/worker.rank<R> (its pid)
  --depth N      helpers in the chain (default 1)
  --then exit    the worker exits 0 once its helpers are up (the job ends)
  --then wait    the worker sleeps until a signal ends it
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--dir", required=True)
parser.add_argument("--depth", type=int, default=1)
parser.add_argument("--then", choices=["exit", "wait"], default="exit")
args = parser.parse_args()
rank = int(os.environ["RANK"])


def write(name: str, text: str) -> None:
    path = os.path.join(args.dir, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def helper(level: int) -> None:
    """Runs in the forked child; never returns."""
    os.setsid()
    if level < args.depth and os.fork() == 0:
        helper(level + 1)
    write(f"helper.rank{rank}.{level}", f"{os.getpid()} {os.getsid(0)} {os.getpgid(0)}")
    while True:
        time.sleep(3600)


if os.fork() == 0:
    try:
        helper(1)
    finally:
        os._exit(1)

deadline = time.monotonic() + 120
names = [f"helper.rank{rank}.{k}" for k in range(1, args.depth + 1)]
while not all(os.path.exists(os.path.join(args.dir, n)) for n in names):
    if time.monotonic() > deadline:
        sys.exit("the helpers did not start")
    time.sleep(0.02)
write(f"worker.rank{rank}", str(os.getpid()))
if args.then == "wait":
    while True:
        time.sleep(3600)
