#!/usr/bin/env python3
"""Plots of the capacity simulator: capacity, world size and progress over time.

Run from the repository root after a release build:

    cmake --preset release && cmake --build --preset release --target elasticctl
    .venv/bin/python bench/sim_plots.py              # every bench/traces/*.trace -> docs/sim_NAME.png
    .venv/bin/python bench/sim_plots.py out.json     # plot JSON that `elasticctl simulate --json` wrote

One PNG per trace: a panel per policy with the nodes available to the job
(grey) and the nodes training (the world size; it drops to 0 while the job
saves, restarts, loads or waits), and a last panel with the tokens (the
trace's unit) each policy trained whose results survive (docs/simulator.md,
"series"). The title of each panel repeats the policy's goodput and token
efficiency from the same run, and its time to train and cost per million
units when the trace gives a work and prices. A trace with a work ends each
run when it is done: the time axis stops at the longest run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COLOURS = ["#4c4c4c", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def simulate(elasticctl: str, trace: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sim.json"
        subprocess.run([elasticctl, "simulate", str(trace), "--json", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def time_axis(duration_s: float) -> tuple[float, str]:
    """Divisor and label: hours up to two days, days beyond."""
    return (86400.0, "days") if duration_s > 2 * 86400 else (3600.0, "hours")


def token_axis(most: float) -> tuple[float, str]:
    for scale, name in ((1e12, "trillions"), (1e9, "billions"), (1e6, "millions")):
        if most >= scale:
            return scale, name
    return 1.0, ""


def node_limits(runs: dict) -> tuple[float, float]:
    """Y range of the size panels: from 0, except on large clusters whose
    sizes all stay near the capacity (a 1,250-node week), where steps of a
    few nodes would not show; drops to 0 then leave the panel at the bottom."""
    top = max(max(r["series"]["capacity"]) for r in runs.values())
    sizes = [w for r in runs.values() for w in r["series"]["world"] if w > 0]
    sizes += [c for r in runs.values() for c in r["series"]["capacity"]]
    low = min(sizes) if sizes else 0
    if top < 100 or low < 0.5 * top:
        return 0, top * 1.08
    span = max(top - low, 1)
    return low - 0.25 * span, top + 0.15 * span


def columns(series: dict, key: str, divisor: float) -> tuple[list, list]:
    """Times in the plot's unit and one column. The series ends at the end
    of the trace, so a step plot needs no extra point."""
    return [t / divisor for t in series["t_s"]], series[key]


def plot(result: dict, out: Path) -> None:
    runs = result["policies"]
    names = list(runs)
    end_s = max(r.get("run_s", result["duration_s"]) for r in runs.values())
    divisor, unit = time_axis(end_s)
    what = result.get("unit", "tokens")
    most = max(max(r["series"]["tokens"]) for r in runs.values())
    tscale, tname = token_axis(most)
    low, high = node_limits(runs)

    fig, axes = plt.subplots(len(names) + 1, 1, sharex=True, figsize=(10, 2 + 1.6 * len(names) + 2.6),
                             gridspec_kw={"height_ratios": [1] * len(names) + [1.6]})
    gpus = result["gpus_per_node"]
    fig.suptitle(f"{Path(result['trace']).name} (seed {result['seed']}): up to "
                 f"{result['nodes_max']} nodes x {gpus} GPUs, static allocation "
                 f"{result['static_size']} nodes\nnodes training: 0 while the job saves, restarts, loads "
                 f"or waits (below the panel where its axis does not start at 0)",
                 fontsize=10)
    for i, name in enumerate(names):
        r, ax = runs[name], axes[i]
        s = r["series"]
        t, cap = columns(s, "capacity", divisor)
        _, world = columns(s, "world", divisor)
        colour = COLOURS[i % len(COLOURS)]
        ax.fill_between(t, low, cap, step="post", color="#d9d9d9", label="nodes available")
        ax.step(t, world, where="post", color=colour, linewidth=1.3, label="nodes training")
        ax.set_ylim(low, high)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
        ax.set_ylabel("nodes")
        ax.grid(True, axis="y", linewidth=0.4, alpha=0.6)
        title = (f"{name}: goodput {100 * r['goodput']:.1f}%, {what} "
                 f"{100 * r['token_efficiency']:.1f}% of ideal, {r['restarts']} restarts")
        if r.get("time_to_train_s") is not None:
            title += f", trained in {r['time_to_train_s'] / 3600:.1f} h"
        if r.get("cost_per_unit") is not None:
            title += f", {r['cost_per_unit'] * 1e6:.3g} per 1M {what}"
        ax.set_title(title, fontsize=9, loc="left")
        if i == 0:
            ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    ax = axes[-1]
    for i, name in enumerate(names):
        t, tokens = columns(runs[name]["series"], "tokens", divisor)
        ax.plot(t, [v / tscale for v in tokens], color=COLOURS[i % len(COLOURS)], linewidth=1.3,
                label=f"{name}: {tokens[-1] / tscale:.3g}", linestyle=["-", "--", "-.", ":"][i % 4])
    ax.set_ylabel(f"{what} trained\n({tname})" if tname else f"{what} trained")
    ax.set_title(f"progress: {what} whose results survive", fontsize=9, loc="left")
    ax.grid(True, linewidth=0.4, alpha=0.6)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    ax.set_xlabel(f"time ({unit})")
    ax.set_xlim(0, end_s / divisor)
    fig.tight_layout()
    fig.savefig(out, dpi=80, metadata={"Software": None})
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="*", type=Path,
                    help="JSON files from `elasticctl simulate --json`; default: simulate every "
                         "bench/traces/*.trace")
    ap.add_argument("--elasticctl", default=os.environ.get("ELASTICCTL",
                                                           str(ROOT / "build/release/elasticctl")))
    ap.add_argument("--out-dir", type=Path, default=ROOT / "docs")
    args = ap.parse_args()
    if args.json:
        results = [json.loads(p.read_text()) for p in args.json]
    else:
        results = [simulate(args.elasticctl, t) for t in sorted((ROOT / "bench/traces").glob("*.trace"))]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for result in results:
        out = args.out_dir / f"sim_{Path(result['trace']).stem}.png"
        plot(result, out)
        print(f"{out} ({out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
