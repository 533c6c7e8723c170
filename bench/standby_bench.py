"""The cost of a standby on the store, and how fast it takes over
(docs/protocol.md, "Standby"): `elasticctl store` alone against the same
store with `elasticctl store --standby-of` attached.

Writes the "standby" section of docs/benchmarks.md. Run from the repository
root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticctl store_loadgen
    .venv/bin/python bench/standby_bench.py [--runs 7] [--seconds 3]

- throughput: bench/store_loadgen's closed loop of SET, GET, ADD with 16
  clients, ops/s over --seconds after a 0.5 s warm-up, in pairs of one run
  per mode in an order drawn per pair, each on fresh stores. With a standby
  every reply after a write waits for the standby's acknowledgement: one
  more round trip on loopback, on the same 2 cores as everything else.
- takeover: SIGKILL of the primary until the standby answers a PING as a
  serving store (a fresh connection every millisecond).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402
from store_process import StoreProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VALIDATE = b"\x00" + struct.pack("<I", 0x3C85F7CE)


def serves(port: str) -> bool:
    """A PING on a fresh connection is echoed (a standby answers STBY and closes)."""
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=0.5) as s:
            s.sendall(VALIDATE + b"\x0d" + struct.pack("<I", 77))
            data = b""
            while len(data) < 4:
                chunk = s.recv(4 - len(data))
                if not chunk:
                    return False
                data += chunk
            return struct.unpack("<I", data)[0] == 77
    except OSError:
        return False


def attached(primary: StoreProcess) -> None:
    """Waits until the primary has sent its standby the snapshot (the
    standby's connection is up and acknowledged)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if serves(primary.port):  # a PING after the snapshot waits for nothing
            time.sleep(0.2)
            return
        time.sleep(0.01)
    raise SystemExit("the primary does not serve")


def throughput(args, with_standby: bool) -> float:
    primary = StoreProcess(args.elasticctl)
    standby = (StoreProcess(args.elasticctl, "--standby-of", primary.endpoint)
               if with_standby else None)
    try:
        if standby:
            attached(primary)
        out = subprocess.run([args.loadgen, "127.0.0.1", primary.port, "--clients", "16",
                              "--seconds", str(args.seconds), "--warmup", "0.5"],
                             capture_output=True, text=True, check=True).stdout
    finally:
        primary.stop()
        if standby:
            standby.stop()
    result = json.loads(out.strip().splitlines()[-1])
    if result["errors"] or result["connected"] != 16:
        raise SystemExit(f"loadgen failed: {result}")
    return result["ops_per_s"]


def takeover_seconds(args) -> float:
    primary = StoreProcess(args.elasticctl)
    standby = StoreProcess(args.elasticctl, "--standby-of", primary.endpoint)
    try:
        attached(primary)
        time.sleep(0.3)
        start = time.monotonic()
        primary.proc.send_signal(signal.SIGKILL)
        while not serves(standby.port):
            if time.monotonic() - start > 30:
                raise SystemExit("the standby did not take over")
            time.sleep(0.001)
        return time.monotonic() - start
    finally:
        primary.stop()
        standby.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elasticctl", default=str(ROOT / "build/release/elasticctl"))
    ap.add_argument("--loadgen", default=str(ROOT / "build/release/bench/store_loadgen"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    ops = {"alone": [], "standby": []}
    for _ in range(args.runs):
        modes = ["alone", "standby"]
        random.shuffle(modes)
        for m in modes:
            ops[m].append(throughput(args, m == "standby"))
    takeovers = [takeover_seconds(args) for _ in range(args.runs)]
    med = {k: statistics.median(v) for k, v in ops.items()}
    take_ms = statistics.median(takeovers) * 1000
    ratio = med["standby"] / med["alone"]
    print(f"throughput alone {med['alone']:,.0f} ops/s, with a standby {med['standby']:,.0f} "
          f"ops/s, ratio {ratio:.3f}; takeover {take_ms:.0f} ms (median of {args.runs})")
    body = (
        f"`elasticctl store` with a standby attached (`elasticctl store --standby-of`) against "
        f"the same store alone; medians of {args.runs} runs each, in pairs of random order, "
        f"each on fresh stores, on {source_state()} ({cpu_model()}).\n\n"
        "| measure | alone | with a standby | with / alone |\n|---|---:|---:|---:|\n"
        f"| throughput, 16 clients (SET, GET, ADD) | {med['alone']:,.0f} ops/s | "
        f"{med['standby']:,.0f} ops/s | {ratio:.3f} |\n\n"
        f"Takeover, from SIGKILL of the primary to the standby answering as the store: "
        f"{take_ms:.0f} ms (median; the follower sees the stream end at once and the "
        f"primary's port not answering a handshake, then promotes).\n\n"
        "Every reply after a write waits for the standby's acknowledgement, so a write costs "
        "one more round trip and the standby's CPU; on this 2-core machine the primary, the "
        "standby and the load generator share the cores.\n\n"
        "Reproduce: `.venv/bin/python bench/standby_bench.py` (after a release build of "
        "elasticctl and store_loadgen).\n")
    if not args.no_report:
        write_section(ROOT / "docs/benchmarks.md", "standby",
                      "## Store throughput with a standby, and its takeover\n\n" + body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
