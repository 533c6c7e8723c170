#!/usr/bin/env python3
"""A worker that records what its launcher gave it, for the parity tests.

Writes <$LAUNCHER_PROBE_DIR>/rank<RANK>.attempt<TORCHELASTIC_RESTART_COUNT>.json
holding its whole environment, sys.argv, sys.orig_argv (the interpreter's own
command line, so `-u` and `-m` show), and its process ids. No torch import:
the probe must be cheap, and it runs under --no-python as an executable too.
"""

import json
import os
import sys


def main() -> None:
    out_dir = os.environ["LAUNCHER_PROBE_DIR"]
    rank = os.environ.get("RANK", "norank")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "noattempt")
    record = {
        "env": dict(os.environ),
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "executable": sys.executable,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
    }
    path = os.path.join(out_dir, f"rank{rank}.attempt{attempt}.json")
    # Rename into place: a reader never sees half a record.
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.rename(path + ".tmp", path)


if __name__ == "__main__":
    main()
