"""Writing a checkpoint so that a crash or a signal cannot leave it half
done: fsyncs of directories, atomic replacement of a small file, and
SIGTERM/SIGINT held off while a rescue is written (checkpoint.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Temp file, fsync, rename over path, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def stop_signals_deferred():
    """SIGTERM and SIGINT wait until the block ends, then take their usual
    course: the agent stops a failed job's workers with SIGTERM, which would
    otherwise cut a rescue short. Only the main thread handles signals; in
    another thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda n, _frame: received.append(n))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)
