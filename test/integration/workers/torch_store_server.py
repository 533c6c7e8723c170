"""PyTorch's own TCPStore server, alone in its process.

Prints `torch store: listening on 127.0.0.1:PORT` once the server is bound,
then sleeps until a signal ends it. Run it in its own process: some torch
client calls (queue ops) hold the GIL while they block, so a torch client in
the same interpreter could starve the server's Python thread.

Usage: python torch_store_server.py   (any Python with torch: the venv's or
Debian's /usr/bin/python3 with torch 1.13)
"""

import signal
import sys

import torch.distributed as dist


def main() -> int:
    # The test stops us with SIGTERM; exit 0 so a crash is distinguishable.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False
        )
    except TypeError:
        # PyTorch < 2.3 (e.g. Debian's 1.13) has no use_libuv: its only
        # server is the poll-based one.
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    print(f"torch store: listening on 127.0.0.1:{store.port}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
