"""A worker for the agent's rescue window after a failure (no torch).

Its role comes from ROLES, a comma-separated list indexed by LOCAL_RANK:
  fail     exits 1 once every other rank is ready (the failure);
  rescuer  attaches the SDK, and once the failed rank is gone marks itself
           stopped (a rescue under way, as CheckpointManager.rescue does),
           works 2.5 s, marks itself saved and exits 0;
  idle     attaches the SDK and waits: it saves no rescue;
  plain    does not attach, and waits.
Each records to <dir>/events.jsonl ("ready", "rescuing", "rescued",
"sigterm"), one JSON line each, with its local rank and time.time(); on
SIGTERM it records it and exits 143.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import elasticrun


def record(directory: Path, event: str) -> None:
    line = json.dumps({"event": event, "local_rank": int(os.environ["LOCAL_RANK"]),
                       "t": time.time()}) + "\n"
    fd = os.open(directory / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its agent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def main() -> int:
    directory = Path(sys.argv[1])
    roles = os.environ["ROLES"].split(",")
    me = int(os.environ["LOCAL_RANK"])
    role = roles[me]

    def on_sigterm(*_):
        record(directory, "sigterm")
        os._exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    if role != "plain" and role != "fail":
        elasticrun.attach()
    if role == "fail":
        others = [r for r in range(len(roles)) if r != me]
        while not all((directory / f"ready.{r}").exists() for r in others):
            time.sleep(0.05)
        (directory / "failed.pid").write_text(str(os.getpid()))
        return 1
    record(directory, "ready")
    (directory / f"ready.{me}").write_text("")
    if role == "rescuer":
        while not (directory / "failed.pid").exists():
            time.sleep(0.02)
        pid = int((directory / "failed.pid").read_text())
        while not gone(pid):
            time.sleep(0.02)
        elasticrun.stopped()
        record(directory, "rescuing")
        time.sleep(2.5)
        record(directory, "rescued")
        elasticrun.saved()
        return 0
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
