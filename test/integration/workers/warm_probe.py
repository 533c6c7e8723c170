"""Records what a worker's interpreter looks like from inside, for the
--warm-start tests: a script run in a warm interpreter must not be able to
tell (beyond modules already imported) that it was not exec'd afresh.

Writes $WARM_PROBE_DIR/rank<RANK>.attempt<TORCHELASTIC_RESTART_COUNT>.json.
FAIL_ON=<rank>:<attempt> makes that rank exit 3 on that attempt, once every
rank of the attempt has written its record (else the agent could stop a rank
that had not yet recorded);
HOLD_FILE=<path>: write rank<RANK>.attempt<N>.holding, then wait until that
file exists before recording.
"""

import json
import os
import signal
import sys
import time

main_globals = sorted(k for k in globals() if k.startswith("__"))


def blocked_signals() -> str:
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("SigBlk:"))


def record() -> dict:
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0") if a]
    return {
        "env": dict(os.environ),
        "name": __name__,
        "file": __file__,
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "executable": sys.executable,
        "path0": sys.path[0],
        "main_globals": main_globals,
        "main_is_module": sys.modules["__main__"].__dict__ is globals(),
        "cwd": os.getcwd(),
        "excepthook_is_default": sys.excepthook is sys.__excepthook__,
        "handlers": {str(s): str(signal.getsignal(s)) for s in (1, 2, 10, 12, 13, 15)},
        "blocked": blocked_signals(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "stdout_unbuffered": sys.stdout.write_through,
        "cmdline": cmdline,
        "torch_imported": "torch" in sys.modules,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
    }


def wait_for_records(attempt: str, world_size: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    suffix = f".attempt{attempt}.json"
    while time.monotonic() < deadline:
        if sum(n.endswith(suffix) for n in os.listdir(os.environ["WARM_PROBE_DIR"])) >= world_size:
            return
        time.sleep(0.05)


def main() -> int:
    rank = os.environ["RANK"]
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    hold = os.environ.get("HOLD_FILE")
    if hold:
        with open(os.path.join(os.environ["WARM_PROBE_DIR"], f"rank{rank}.attempt{attempt}.holding"),
                  "w") as f:
            f.write(str(os.getpid()))
    while hold and not os.path.exists(hold):
        time.sleep(0.05)
    rec = record()
    path = os.path.join(os.environ["WARM_PROBE_DIR"], f"rank{rank}.attempt{attempt}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    os.rename(path + ".tmp", path)
    print(f"probe rank {rank} attempt {attempt}", flush=True)
    if os.environ.get("FAIL_ON") == f"{rank}:{attempt}":
        wait_for_records(attempt, int(os.environ["WORLD_SIZE"]))
        raise SystemExit(3)
    if os.environ.get("RAISE_ON") == f"{rank}:{attempt}":
        raise RuntimeError(f"rank {rank} gives up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
