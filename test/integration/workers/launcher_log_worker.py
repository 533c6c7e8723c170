#!/usr/bin/env python3
"""A worker that prints known lines, for the log parity tests.

Every line the worker prints names its stream and global rank and ends with
";", so that a test can find it in a launcher's console whatever the prefix,
and whatever another writer glued to it (torchrun prints a last line that
has no newline without one). Each line is one write(2), so that workers
sharing an inherited console never split each other's lines.

What each stream gets, in order: plain lines, some with the words the
--duplicate-*-filters scenarios look for (apple, orange), an empty line,
non-ASCII text, a progress bar drawn with carriage returns (as tqdm does),
a line ended by "\\r\\n", and a last line with no newline at all.

LAUNCHER_LOG_WORKER_FAIL_RANK=<rank>: that rank writes an error file as
torch's @record does (with a fixed timestamp, so that two runs write the
same bytes) and exits 1 after printing, once every other rank has printed
everything (each says so with a file in LAUNCHER_LOG_WORKER_DONE_DIR): the
launcher stops the survivors when a worker fails, and their logs must not
depend on how quickly it does. No torch import: the
worker must be cheap.
"""

import json
import os
import sys
import time


def lines(stream: str, rank: str) -> list[bytes]:
    tag = f"lp:{stream}:r{rank}"
    return [
        f"{tag}:1 hello;\n".encode(),
        f"{tag}:2 an apple a day;\n".encode(),
        f"{tag}:3 banana;\n".encode(),
        b"\n",
        f"{tag}:4 orange juice, café ✓;\n".encode(),
        f"{tag}:5 progress 1/2;\r{tag}:6 progress 2/2, orange;\r{tag}:7 done;\n".encode(),
        f"{tag}:8 crlf;\r\n".encode(),
        f"{tag}:9 tail without newline, apple;".encode(),
    ]


def write_error_file(rank: str) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {
        "message": {
            "message": f"RuntimeError: rank {rank} failed on purpose",
            "extraInfo": {"py_callstack": "Traceback: (made up)", "timestamp": "1700000000"},
        }
    }
    with open(path, "w") as f:
        json.dump(record, f)


def main() -> int:
    rank = os.environ.get("RANK", "norank")
    for stream, fd in (("out", 1), ("err", 2)):
        for chunk in lines(stream, rank):
            os.write(fd, chunk)
    done_dir = os.environ.get("LAUNCHER_LOG_WORKER_DONE_DIR")
    if os.environ.get("LAUNCHER_LOG_WORKER_FAIL_RANK") == rank:
        wait_for_the_others(done_dir, rank)
        write_error_file(rank)
        return 1
    if done_dir:
        open(os.path.join(done_dir, f"rank{rank}.done"), "w").close()
    return 0


def wait_for_the_others(done_dir: str, rank: str) -> None:
    others = [r for r in range(int(os.environ["WORLD_SIZE"])) if str(r) != rank]
    deadline = time.monotonic() + 60  # bounds a hang; the test fails on the logs then
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(done_dir, f"rank{r}.done")) for r in others):
            return
        time.sleep(0.01)


if __name__ == "__main__":
    sys.exit(main())
