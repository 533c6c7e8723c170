#!/usr/bin/env python3
"""Where to train: the cost per useful sample of four single-GPU spot nodes
against one four-GPU on-demand node, and the interruption rate and spot
discount at which the spot fleet stops being the cheaper (docs/benchmarks.md,
"Where to train").

Plays bench/traces/g5_spot_4x2xlarge.trace with `elasticctl simulate` at a
range of interruption rates (its `notices` rate; its written-out bad hour
left out), over SEEDS seeds each, under torchrun's restart-everything
behaviour (the simulator's restart_on_change) and elasticrun's policy
(elastic) with the trace's recovery costs for --inprocess-restart and again
with --warm-start's, and bench/traces/g5_ondemand_12xlarge.trace once. Every
assumption (throughputs, prices, recovery costs and where each comes from)
is in the two traces' comments.

The cost of the spot fleet is linear in its price, so one simulation per
rate and seed gives the cost at every discount: node-hours billed per useful
sample times the price. The break-even discount at a rate is the discount at
which that equals the on-demand node's cost per sample; the break-even rate
at a discount is where the break-even discount reaches it.

Run from the repository root after a build (any build type prints the
same):

    cmake --preset release && cmake --build --preset release --target elasticctl
    .venv/bin/python bench/spot_breakeven.py               # prints the table
    .venv/bin/python bench/spot_breakeven.py --write-docs  # and docs/benchmarks.md, docs/spot_breakeven.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPOT = ROOT / "bench/traces/g5_spot_4x2xlarge.trace"
ON_DEMAND = ROOT / "bench/traces/g5_ondemand_12xlarge.trace"
# us-east-1 on-demand list price of the spot nodes' instance (g5.2xlarge),
# against which a spot price is a discount.
LIST_PRICE = 1.212
# Up to rates where an instance lives less than its own notice: elasticrun's
# break-even lies there.
RATES = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0,
         40.0, 80.0, 160.0]
DISCOUNTS = [0.60, 0.65, 0.70]
ELASTIC_POLICIES = "static,elastic,elastic-nostab,elastic-nospares"
# --warm-start: 2.6 s from an event to the first new step (docs/benchmarks.md,
# "Goodput under churn"), and the ViT-B state's save at the stop and load at
# DCP's measured speeds (2.3 s, 1.1 s; the traces' comments).
WARM_START_COSTS = f"costs {ELASTIC_POLICIES} restart=2.6s checkpoint_load=1.1s stop_save=2.3s"

# (label, trace variant, simulator policy)
VARIANTS = [
    ("torchrun (restart everything)", "inprocess", "restart_on_change"),
    ("elasticrun --inprocess-restart", "inprocess", "elastic"),
    ("elasticrun --warm-start", "warm", "elastic"),
]


def spot_trace(text: str, rate: float, variant: str) -> str:
    """The spot trace at `rate`, without its explicit events, with the
    variant's recovery costs."""
    lines = []
    for line in text.splitlines():
        word = line.split("#", 1)[0].split()
        if word and word[0] == "at":
            continue
        if word and word[0] == "notices":
            line = re.sub(r"rate=[0-9.eE+-]+", f"rate={rate:g}", line)
        if word and word[0] == "costs" and variant == "warm":
            line = WARM_START_COSTS
        lines.append(line)
    return "\n".join(lines) + "\n"


def simulate(elasticctl: str, trace: Path, policies: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sim.json"
        subprocess.run([elasticctl, "simulate", str(trace), "--json", str(out), "--policies",
                        policies, "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return json.loads(out.read_text())


def throughput(doc: dict) -> dict[int, float]:
    """The trace's throughput points, nodes to samples/s, as the simulator
    read them: this script reads no trace itself."""
    return {int(n): t for n, t in doc["throughput"].items()}


def sweep(elasticctl: str, seeds: int) -> tuple[dict, dict, dict]:
    """{label: {rate: totals}} for the spot fleet; the on-demand trace's
    JSON; and per variant one JSON of the spot trace, for its prices,
    throughput and each policy's recovery costs."""
    text = SPOT.read_text()
    on_demand = simulate(elasticctl, ON_DEMAND, "elastic", 1)
    results = {label: {} for label, _, _ in VARIANTS}
    settings: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        jobs = []
        for rate in RATES:
            for variant in ("inprocess", "warm"):
                path = Path(tmp) / f"spot_{rate:g}_{variant}.trace"
                path.write_text(spot_trace(text, rate, variant))
                policies = ",".join(sorted({p for _, v, p in VARIANTS if v == variant}))
                # Without interruptions every seed plays the same run.
                for seed in range(1, (seeds if rate > 0 else 1) + 1):
                    jobs.append((rate, variant, pool.submit(simulate, elasticctl, path, policies, seed)))
        for rate, variant, job in jobs:
            doc = job.result()
            settings.setdefault(variant, doc)
            runs = doc["policies"]
            for label, v, policy in VARIANTS:
                if v != variant:
                    continue
                r = runs[policy]
                t = results[label].setdefault(rate, {"runs": 0, "node_hours": 0.0, "samples": 0.0,
                                                     "time": 0.0, "unfinished": 0, "goodput": 0.0,
                                                     "restarts": 0})
                t["runs"] += 1
                t["node_hours"] += r["spot_node_hours"] + r["on_demand_node_hours"]
                t["samples"] += r["tokens"]
                t["goodput"] += r["goodput"]
                t["restarts"] += r["restarts"]
                if r["time_to_train_s"] is None:
                    t["unfinished"] += 1
                else:
                    t["time"] += r["time_to_train_s"]
    return results, on_demand, settings


def node_hours_per_sample(t: dict) -> float:
    """Billed node-hours per useful sample; infinite when nothing useful was
    trained."""
    return t["node_hours"] / t["samples"] if t["samples"] > 0 else math.inf


def breakeven_discount(t: dict, od_per_sample: float) -> float:
    """The spot discount below which the fleet costs more per sample."""
    return 1 - od_per_sample / node_hours_per_sample(t) / LIST_PRICE


def breakeven_rate(series: dict, od_per_sample: float, discount: float) -> float | None:
    """The interruption rate at which the break-even discount reaches
    `discount`, interpolated in log(rate); None when not within the sweep,
    0 when the fleet is dearer even without interruptions."""
    points = [(rate, breakeven_discount(t, od_per_sample)) for rate, t in sorted(series.items())]
    if points[0][1] >= discount:
        return 0.0
    for (r0, d0), (r1, d1) in zip(points, points[1:]):
        if d0 < discount <= d1:
            if r0 == 0:
                return r1 * (discount - d0) / (d1 - d0)
            f = (discount - d0) / (d1 - d0)
            return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))
    return None


def seconds(s: float) -> str:
    return f"{s:g} s"


def hours(s: float) -> str:
    return f"{s / 3600:.1f} h"


def rate_text(r: float | None) -> str:
    if r is None:
        return f"above {RATES[-1]:g}"
    return f"{r:.2g}" if r > 0 else "0 (dearer even without interruptions)"


def report(results: dict, on_demand_doc: dict, settings: dict, seeds: int) -> tuple[str, dict]:
    spot = settings["inprocess"]
    price = spot["prices"]["spot"]
    discount = 1 - price / LIST_PRICE
    on_demand = on_demand_doc["policies"]["elastic"]
    od_per_sample = on_demand["cost_per_unit"]
    spot_tp, od_tp = throughput(spot), throughput(on_demand_doc)
    torch_costs = spot["policies"]["restart_on_change"]["recovery"]
    inproc_costs = spot["policies"]["elastic"]["recovery"]
    warm_costs = settings["warm"]["policies"]["elastic"]["recovery"]
    every = f"every {spot['checkpoint_every_s'] / 60:g} min, {spot['checkpoint_save_s']:g} s"
    od_every = (f"every {on_demand_doc['checkpoint_every_s'] / 60:g} min, "
                f"{on_demand_doc['checkpoint_save_s']:g} s")
    same = "the same"
    work = f"{spot['work']:,.0f} {spot['unit']}"
    od_work = f"{on_demand_doc['work']:,.0f} {on_demand_doc['unit']}"
    labels = [label for label, _, _ in VARIANTS]
    head = "| interruptions per node-hour | " + " | ".join(
        f"{label}: cost per 1M samples, time to train, break-even discount" for label in labels) + " |"
    rows = [head, "|---:|" + "---:|" * len(labels)]
    for rate in RATES:
        cells = [f"{rate:g}"]
        for label in labels:
            t = results[label][rate]
            per_m = price * node_hours_per_sample(t) * 1e6
            done = t["runs"] - t["unfinished"]
            time = hours(t["time"] / done) if done else "-"
            if t["unfinished"]:
                time += f" ({t['unfinished']} of {t['runs']} unfinished in 7 d)"
            cost = (f"${per_m:.3f}" if per_m < 10 else f"${per_m:,.3g}" if per_m < 1000
                    else f"${per_m:,.0f}" if per_m < math.inf else "no useful sample")
            cells.append(f"{cost}, {time}, {100 * breakeven_discount(t, od_per_sample):.0f}%")
        rows.append("| " + " | ".join(cells) + " |")
    breakeven = {label: {d: breakeven_rate(results[label], od_per_sample, d) for d in DISCOUNTS}
                 for label in labels}
    lines = [
        "# Where to train: cost per useful sample, four single-GPU spot nodes vs one four-GPU "
        "on-demand node",
        "",
        f"Generated by `bench/spot_breakeven.py` with `elasticctl simulate` (the capacity "
        f"simulator, docs/simulator.md) on {seeds} seeds per interruption rate; source: "
        f"{source_state()}. The simulator's figures depend only on the traces and the seeds, "
        "not on the machine.",
        "",
        "Reproduce (from the repository root):",
        "",
        "```sh",
        "cmake --preset release && cmake --build --preset release --target elasticctl",
        f".venv/bin/python bench/spot_breakeven.py --seeds {seeds} --write-docs",
        "```",
        "",
        "The question is AWS's published comparison of four single-GPU spot instances "
        "(g5.2xlarge) against one four-GPU on-demand instance (g5.12xlarge) on a ViT job, "
        "asked with each launcher's own recovery: at what interruption rate, and at what spot "
        "discount, does the spot fleet stop being cheaper per useful sample? Useful: samples "
        "whose training survives (not rolled back, not lost with a node).",
        "",
        "What is assumed, and from where (each trace's comments say it in full): "
        "`bench/traces/g5_spot_4x2xlarge.trace`, `bench/traces/g5_ondemand_12xlarge.trace`.",
        "",
        "| | spot fleet | on-demand node |",
        "|---|---|---|",
        f"| instances | {spot['nodes_max']} x g5.2xlarge-like ({spot['gpus_per_node']} A10G each) "
        f"| {on_demand_doc['nodes_max']} x g5.12xlarge-like ({on_demand_doc['gpus_per_node']} "
        "A10G) |",
        "| samples/s (assumed, ViT-B/16) | "
        f"{', '.join(f'{t:,.0f}' for t in spot_tp.values())} at {min(spot_tp)}-{max(spot_tp)} "
        f"nodes | {', '.join(f'{t:,.0f}' for t in od_tp.values())} |",
        f"| price per instance-hour | ${price:.3f} spot: a {100 * discount:.0f}% discount on "
        f"${LIST_PRICE} on demand (us-east-1; discounts vary, 60-70% assumed) | "
        f"${on_demand_doc['prices']['on_demand']} on demand (us-east-1) |",
        f"| work | {work} (about 70 epochs of ImageNet-1k) | "
        f"{same if od_work == work else od_work} |",
        "| interruptions | a notice at the rate swept, the node gone 2 min later, a replacement "
        "10 min after the notice | none |",
        f"| periodic checkpoints | {every} (1.04 GB at DCP's 0.46 GB/s: "
        f"\"Checkpoint save and resharding load\") | {same if od_every == every else od_every} |",
        f"| torchrun's recovery | {seconds(torch_costs['restart_s'])} per change (\"Goodput under "
        "churn ... (spot trace, in-process re-formation)\": torchrun's recovery after an event, "
        f"mean 16.4 s) plus a {seconds(torch_costs['checkpoint_load_s'])} load (DCP's 0.95 GB/s); "
        "the work since the last checkpoint is lost at every change; it does not hear the notice "
        "and loses the node when it goes | - |",
        f"| elasticrun's recovery | --inprocess-restart: {seconds(inproc_costs['restart_s'])} per "
        "change (the same section: time lost per event) plus "
        f"{seconds(inproc_costs['checkpoint_load_s'])} to copy the state to a joining node "
        f"(derived); --warm-start: {seconds(warm_costs['restart_s'])} (\"Goodput under churn\": "
        f"recovery after an event, mean) plus the {seconds(warm_costs['stop_save_s'])} save at the "
        f"stop and the {seconds(warm_costs['checkpoint_load_s'])} load; it hears the notice "
        "(--spot-notice-url) and leaves at once | - |",
        "",
        f"On demand: {hours(on_demand['time_to_train_s'])} to train, "
        f"${on_demand['cost']:.2f}, **${od_per_sample * 1e6:.3f} per 1M samples**.",
        "",
        f"Spot fleet at ${price:.3f} a node-hour (mean time to train over the seeds; cost per "
        "sample as the seeds' billed node-hours over their useful samples; the break-even "
        "discount is the discount below which the fleet costs more per sample than the "
        "on-demand node):",
        "",
        *rows,
        "",
        "Break-even interruption rate (per node-hour) at which the spot fleet stops being cheaper "
        "per useful sample than the on-demand node:",
        "",
        "| spot discount | " + " | ".join(labels) + " |",
        "|---:|" + "---:|" * len(labels),
        *[f"| {100 * d:.0f}% | " + " | ".join(rate_text(breakeven[label][d]) for label in labels) + " |"
          for d in DISCOUNTS],
        "",
        *summary(results, od_per_sample, price, breakeven, spot_tp, od_tp,
                 on_demand_doc["prices"]["on_demand"], torch_costs),
        "",
        "![cost per useful sample and break-even](spot_breakeven.png)",
        "",
        "Not modelled (docs/simulator.md, \"Not done yet\"): hardware failures on either side, "
        "the spot price's movements within a run, capacity that is not there at all (a request "
        "never filled), the billing of a replacement's boot before it joins, and any rebate for "
        "an instance interrupted early in its life.",
        "",
    ]
    return "\n".join(lines), breakeven


def summary(results: dict, od_per_sample: float, price: float, breakeven: dict,
            spot_tp: dict[int, float], od_tp: dict[int, float], od_price: float,
            torch_costs: dict) -> list[str]:
    """What the figures say, with the figures."""
    torch_label, inproc_label, warm_label = (label for label, _, _ in VARIANTS)
    base = results[inproc_label][0.0]
    torch = breakeven[torch_label]
    inproc = breakeven[inproc_label]
    warm = breakeven[warm_label]
    nodes = max(spot_tp)
    # The fleet's throughput at which it costs what the node does, both on demand.
    even = nodes * LIST_PRICE * od_tp[1] / od_price / (nodes * spot_tp[1])
    never = [r for r in RATES if r > 0 and results[torch_label][r]["unfinished"] == results[torch_label][r]["runs"]]
    life_s = 3600 / inproc[0.65] if inproc[0.65] else math.inf
    return [
        "What it shows:",
        "",
        f"- Without interruptions the fleet costs ${price * node_hours_per_sample(base) * 1e6:.3f} per "
        f"1M samples against ${od_per_sample * 1e6:.3f} on demand. Its break-even discount is "
        f"{100 * breakeven_discount(base, od_per_sample):.0f}%: at the assumed throughputs four "
        f"g5.2xlarge cost less per sample than one g5.12xlarge even at on-demand prices "
        f"({nodes} x ${LIST_PRICE} an hour for {spot_tp[nodes]:,.0f} samples/s against "
        f"${od_price} for {od_tp[1]:,.0f}), and the spot discount only widens the gap. That rests "
        f"on the assumed scaling across nodes ({100 * spot_tp[nodes] / (nodes * spot_tp[1]):.0f}% "
        f"of linear at {nodes}): at {100 * even:.0f}% of linear the two would cost the same on "
        "demand.",
        f"- Under torchrun's restart-everything behaviour the fleet stops being cheaper at "
        f"**{rate_text(torch[0.65])} interruptions per node-hour** at a 65% discount "
        f"({rate_text(torch[0.60])} at 60%, {rate_text(torch[0.70])} at 70%). Each interruption "
        "is two changes (the node's loss when its notice runs out, its replacement's join), and "
        "each change throws away the work since the last checkpoint (5 minutes of the whole "
        f"fleet on average with one every 10) and "
        f"{torch_costs['restart_s'] + torch_costs['checkpoint_load_s']:.0f} s of restart and load."
        + (f" From {never[0]:g} per node-hour no seed finishes the work within 7 days: the loop "
           "where the job runs a few steps, is interrupted and never progresses." if never else ""),
        f"- Under elasticrun's policy it stays cheaper up to **{rate_text(inproc[0.65])} per "
        f"node-hour** with --inprocess-restart ({rate_text(inproc[0.60])} at 60%, "
        f"{rate_text(inproc[0.70])} at 70%) and {rate_text(warm[0.65])} with --warm-start: "
        f"instances that live about {life_s:.0f} s before their 2-minute notice, less than the "
        "notice itself: in practice, never. It hears the notice and leaves at once, at the cost of "
        "about 2 s of the fleet, nothing rolled back; a missing node costs nothing, since it is "
        "not billed and three nodes train at about the cost per sample of four; what it does "
        "pay is the noticed node's notice, billed and not trained on, and that is what "
        "eventually makes it dearer.",
        "- The published interruption frequencies are far below either line: AWS's Spot "
        "Instance Advisor tops out at \">20%\" a month, which, read as the share of instances "
        "interrupted in a month, is about 0.0003 per node-hour. At such rates both launchers' "
        "fleets cost what they cost without interruptions; the rates above are those of a bad "
        "day in a scarce pool (the shipped trace's 0.05, its hour with an interruption every 10 "
        "minutes).",
    ]


def source_state() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from report_sections import source_state as state
    return state()


def plot(results: dict, on_demand_doc: dict, settings: dict, breakeven: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    price = settings["inprocess"]["prices"]["spot"]
    on_demand = on_demand_doc["policies"]["elastic"]
    od_per_m = on_demand["cost_per_unit"] * 1e6
    colours = {"torchrun (restart everything)": "#d62728", "elasticrun --inprocess-restart": "#1f77b4",
               "elasticrun --warm-start": "#2ca02c"}
    styles = {"elasticrun --warm-start": "--"}
    rates = [r for r in RATES if r > 0]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(9, 8))
    fig.suptitle("4 single-GPU spot nodes (g5.2xlarge-like) vs 1 four-GPU on-demand node "
                 "(g5.12xlarge-like)\nViT-B/16, 90 M samples; assumptions in "
                 "bench/traces/g5_*.trace", fontsize=10)
    for label, series in results.items():
        per_sample = [node_hours_per_sample(series[r]) for r in rates]
        colour = colours[label]
        ax1.plot(rates, [price * x * 1e6 for x in per_sample], color=colour,
                 linestyle=styles.get(label, "-"), marker="o", markersize=3,
                 label=f"spot fleet, {label}")
        ax1.fill_between(rates, [LIST_PRICE * 0.30 * x * 1e6 for x in per_sample],
                         [LIST_PRICE * 0.40 * x * 1e6 for x in per_sample], color=colour, alpha=0.12)
        ax2.plot(rates, [100 * breakeven_discount(series[r], on_demand["cost_per_unit"]) for r in rates],
                 color=colour, linestyle=styles.get(label, "-"), marker="o", markersize=3, label=label)
        rate = breakeven[label][0.65]
        # The two elasticrun modes' lines nearly coincide: one label is enough.
        if rate and label in styles:
            continue
        if rate:
            for ax in (ax1, ax2):
                ax.axvline(rate, color=colour, linestyle=":", linewidth=1)
            ax2.annotate(f"{rate:.2g}", (rate, 65), xytext=(4, -12), textcoords="offset points",
                         color=colour, fontsize=8)
    ax1.axhline(od_per_m, color="#4c4c4c", linewidth=1.5, label="on-demand node")
    ax1.set_yscale("log")
    ax1.set_ylim(0.3, 30)
    ax1.set_ylabel("cost per 1M useful samples ($)")
    ax1.set_title(f"at a {100 * (1 - price / LIST_PRICE):.0f}% spot discount (bands: 60-70%); "
                  "dotted: the break-even rates at 65%", fontsize=9, loc="left")
    ax1.grid(True, which="both", linewidth=0.4, alpha=0.6)
    ax1.legend(fontsize=8, loc="upper left")
    ax2.axhspan(60, 70, color="#d9d9d9", alpha=0.6, label="assumed spot discounts (60-70%)")
    ax2.set_ylabel("break-even spot discount (%)")
    ax2.set_title("the spot fleet is cheaper per useful sample above its line", fontsize=9, loc="left")
    ax2.set_ylim(-20, 100)
    ax2.grid(True, which="both", linewidth=0.4, alpha=0.6)
    ax2.legend(fontsize=8, loc="lower right")
    ax2.set_xscale("log")
    ax2.set_xlabel("spot interruptions per node-hour (a notice 2 min before the node goes, "
                   "a replacement 10 min after it)")
    fig.tight_layout()
    fig.savefig(out, dpi=80, metadata={"Software": None})
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elasticctl", default=os.environ.get("ELASTICCTL",
                                                           str(ROOT / "build/release/elasticctl")))
    ap.add_argument("--seeds", type=int, default=40, help="seeds per interruption rate")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the section of docs/benchmarks.md and docs/spot_breakeven.png")
    args = ap.parse_args()
    results, on_demand, settings = sweep(args.elasticctl, args.seeds)
    body, breakeven = report(results, on_demand, settings, args.seeds)
    print(body)
    if args.write_docs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report_sections import write_section
        write_section(ROOT / "docs/benchmarks.md", "spot-cost", body)
        plot(results, on_demand, settings, breakeven, ROOT / "docs/spot_breakeven.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
