"""The cost of seeing a job: elasticrun with its event log and its HTTP
server (Prometheus metrics, the control API) on, against both off.

Writes the "observe" section of docs/benchmarks.md. Run from the repository
root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticrun
    .venv/bin/python bench/observe_bench.py [--runs 11]

"on" is `--event-log FILE --metrics-port 0` (the log written to a file on
the benchmark's temporary directory, the server bound and serving); "off"
is neither. Measured as launcher_bench.py measures them, in pairs of one
run of each, in an order drawn per pair, so that a change in the
machine's load hits both and neither always follows the other (a restart
run leaves its killed workers' cleanup behind: launches and restarts are
measured in loops of their own). The median of the pairs' differences is
printed beside the ratio of medians:
- launch: `--standalone --nproc-per-node 8 --no-python /bin/true`, start to
  exit;
- restart: 8 native workers, --max-restarts 1, from SIGKILL of local rank 3
  until all 8 of the next attempt have written their start marker.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launcher_bench import (  # noqa: E402
    ROOT,
    build_native_worker,
    env_with_venv,
    launch_time,
    restart_latency,
)
from report_sections import cpu_model, source_state, write_section  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elasticrun", default=str(ROOT / "build/release/elasticrun"))
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    env = env_with_venv()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        worker = build_native_worker(tmp)
        if worker is None:
            print("no C compiler: cannot build the native worker", file=sys.stderr)
            return 1
        events = tmp / "events.jsonl"
        modes = {"off": [args.elasticrun],
                 "on": [args.elasticrun, "--event-log", str(events), "--metrics-port", "0"]}
        res: dict[tuple[str, str], list[float]] = {}
        measures = {"launch": lambda cmd: launch_time(cmd, env),
                    "restart": lambda cmd: restart_latency(cmd, env, tmp, worker)}
        for what, measure in measures.items():
            for _ in range(args.runs):
                order = list(modes)
                random.shuffle(order)
                for mode in order:
                    res.setdefault((mode, what), []).append(measure(modes[mode]))
        lines = events.read_text().splitlines()
    med = {k: statistics.median(v) for k, v in res.items()}
    rows = []
    for what, label in (("launch", "launch, 8 workers (`/bin/true`)"),
                        ("restart", "restart, 8 native workers (SIGKILL to all 8 running)")):
        off, on = med[("off", what)], med[("on", what)]
        rows.append(f"| {label} | {off * 1e3:.1f} ms | {on * 1e3:.1f} ms | {on / off:.3f} |")
        diff = statistics.median(a - b for a, b in zip(res[("on", what)], res[("off", what)]))
        print(f"{what:8s} off {off * 1e3:7.1f} ms  on {on * 1e3:7.1f} ms  ratio {on / off:.3f}"
              f"  paired difference {diff * 1e3:+.2f} ms")
    body = "\n".join([
        "Event log and HTTP server on (`--event-log FILE --metrics-port 0`) against both off; "
        f"medians of {args.runs} runs each, in pairs of random order, on {source_state()} "
        f"({cpu_model()}, {os.cpu_count()} CPUs; {len(lines)} event lines written in all).",
        "",
        "| measure | off | on | on / off |",
        "|---|---:|---:|---:|",
        *rows,
        "",
        "Reproduce: `.venv/bin/python bench/observe_bench.py` (after a release build).",
    ])
    if not args.no_report:
        write_section(ROOT / "docs/benchmarks.md", "observe", "## Event log and metrics\n\n" + body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
