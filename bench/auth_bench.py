"""The cost of the job secret on the store (docs/security.md): `elasticctl
store` with `--secret-file` against the same store without one.

Writes the "auth" section of docs/benchmarks.md. Run from the repository
root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticctl store_loadgen
    .venv/bin/python bench/auth_bench.py [--runs 7] [--seconds 3]

Two measures, each in pairs of one run per mode in an order drawn per pair,
every run on a fresh store:
- throughput: bench/store_loadgen's closed loop of SET, GET, ADD with 16
  clients (the issue's figure), ops/s over --seconds after a 0.5 s warm-up;
  the handshake happens while connecting, before the window;
- connection set-up: the time to connect and handshake 1,000 connections
  (store_loadgen --idle; 256 at a time), which is where the secret costs
  something: one more round trip and two HMAC-SHA256s per connection.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402
from store_process import StoreProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def secret_flags(secret: Path | None) -> list[str]:
    return ["--secret-file", str(secret)] if secret else []


def loadgen(args, port: str, secret: Path | None, *extra: str) -> str:
    cmd = [args.loadgen, "127.0.0.1", port, *extra]
    if secret:
        cmd += ["--secret-file", str(secret)]
    return cmd


def throughput(args, secret: Path | None) -> float:
    with StoreProcess(args.elasticctl, *secret_flags(secret)) as store:
        out = subprocess.run(loadgen(args, store.port, secret, "--clients", "16", "--seconds",
                                     str(args.seconds), "--warmup", "0.5"),
                             capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["errors"] or result["connected"] != 16:
        raise SystemExit(f"loadgen failed: {result}")
    return result["ops_per_s"]


def setup_seconds(args, secret: Path | None) -> float:
    with StoreProcess(args.elasticctl, *secret_flags(secret)) as store:
        p = subprocess.Popen(loadgen(args, store.port, secret, "--idle", "1000"),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        p.stdin.close()
        p.wait(60)
    ready = json.loads(line.split(" ", 1)[1])
    if ready["errors"] or ready["connections"] != 1000:
        raise SystemExit(f"loadgen failed: {ready}")
    return ready["setup_s"]


def pairs(runs: int, measure) -> dict[str, list[float]]:
    out = {"off": [], "on": []}
    for _ in range(runs):
        modes = ["off", "on"]
        random.shuffle(modes)
        for m in modes:
            out[m].append(measure(m))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elasticctl", default=str(ROOT / "build/release/elasticctl"))
    ap.add_argument("--loadgen", default=str(ROOT / "build/release/bench/store_loadgen"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        secret = Path(d) / "job.secret"
        secret.write_text(secrets.token_hex(32) + "\n")
        pick = {"off": None, "on": secret}
        ops = pairs(args.runs, lambda m: throughput(args, pick[m]))
        setup = pairs(args.runs, lambda m: setup_seconds(args, pick[m]))
    med = {k: statistics.median(v) for k, v in ops.items()}
    smed = {k: statistics.median(v) * 1000 for k, v in setup.items()}
    rows = [
        ("throughput, 16 clients (SET, GET, ADD)", f"{med['off']:,.0f} ops/s",
         f"{med['on']:,.0f} ops/s", med["on"] / med["off"]),
        ("connect and handshake 1,000 connections", f"{smed['off']:.1f} ms",
         f"{smed['on']:.1f} ms", smed["on"] / smed["off"]),
    ]
    for name, off, on, ratio in rows:
        print(f"{name:42s} off {off:>14s}  on {on:>14s}  ratio {ratio:.3f}")
    body = (
        f"`elasticctl store` with `--secret-file` (on) against without (off); medians of "
        f"{args.runs} runs each, in pairs of random order, each on a fresh store, on "
        f"{source_state()} ({cpu_model()}).\n\n"
        "| measure | off | on | on / off |\n|---|---:|---:|---:|\n"
        + "".join(f"| {n} | {a} | {b} | {r:.3f} |\n" for n, a, b, r in rows)
        + "\nReproduce: `.venv/bin/python bench/auth_bench.py` (after a release build of "
          "elasticctl and store_loadgen).\n")
    if not args.no_report:
        write_section(ROOT / "docs/benchmarks.md", "auth",
                      "## Store throughput with a job secret\n\n" + body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
