"""Where a churned run's wall time went, from the workers' timing records.

Input: the records examples/python/train_elastic.py and train_inprocess.py
write with --events (examples/python/bench_events.py: start, init, step,
save, usr1, error, exit; every record carries pid, rank, world and attempt,
rank 0's start time, which names one set of workers; a process that
re-forms in process has records in several sets), the events the harness played (absolute times) and the
run's start and end. Pure computation: the integration suite checks it on a
hand-made log.

- A step *survives* when its execution is the last one of that step number
  (by end time): an execution that a later one repeats was lost to a
  rollback. Only rank 0's steps and saves are counted (ranks step and
  save in lock-step), but for a rescue save, made by any survivor of a
  failure, and for a step rank 0 did not record because it was killed
  after the step's last collective, which the others completed: the
  lowest rank's record counts then (see attempts_of()).
- goodput = time in surviving steps / wall time.
- Every instant of the wall time goes to exactly one category, the first
  of CATEGORIES that covers it.
- Each event's recovery runs from the event to the end of the first step
  of the next set of workers that trains, split into phases (see
  recovery()). Events followed by the same such set share one recovery,
  timed from the first of them; a set of workers that never reached a step
  in between (cut short by the next event) is inside it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

KEPT = "training, kept"
LOST = "training, lost to rollback"
SAVE_PERIODIC = "checkpoint save, periodic"
SAVE_STOP = "checkpoint save, at a stop"
SAVE_RESCUE = "checkpoint save, rescue after a failure"
SAVE_FINAL = "checkpoint save, final"
LOAD = "checkpoint load"
START = "worker start: interpreter, import torch, process group, model"
BETWEEN = "in the loop between steps"
IDLE = "no training: detection, stop, rendezvous, spawn"
CATEGORIES = [KEPT, LOST, SAVE_PERIODIC, SAVE_STOP, SAVE_RESCUE, SAVE_FINAL, LOAD, START, BETWEEN,
              IDLE]
SAVE_LABEL = {"periodic": SAVE_PERIODIC, "resize": SAVE_STOP, "rescue": SAVE_RESCUE,
              "final": SAVE_FINAL}

PHASES = ["detection", "stop", "checkpoint save", "rendezvous", "restart", "checkpoint load",
          "first step"]


def load_records(directory: Path) -> list[dict]:
    out = []
    for path in sorted(Path(directory).glob("events.*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by a kill
    return out


def classify(intervals: list[tuple[float, float, str]], start: float, end: float) -> dict[str, float]:
    """Seconds of [start, end] per category: each instant goes to the first
    category in CATEGORIES among the intervals covering it, else IDLE."""
    rank = {c: i for i, c in enumerate(CATEGORIES)}
    points = []
    for a, b, label in intervals:
        a, b = max(a, start), min(b, end)
        if b > a:
            points.append((a, 1, rank[label]))
            points.append((b, -1, rank[label]))
    points.sort()
    active = [0] * len(CATEGORIES)
    out = {c: 0.0 for c in CATEGORIES}
    prev = start
    for t, delta, r in points:
        if t > prev:
            top = next((i for i, n in enumerate(active) if n), rank[IDLE])
            out[CATEGORIES[top]] += t - prev
            prev = t
        active[r] += delta
    if end > prev:
        out[IDLE] += end - prev
    return out


class Attempt:
    """One set of workers: the processes that share an attempt id."""

    def __init__(self, attempt: float):
        self.id = attempt
        self.starts: list[dict] = []
        self.inits: list[dict] = []
        self.steps: list[dict] = []   # one per step: rank 0's, else the lowest rank's
        self.saves: list[dict] = []   # rank 0's, and any rank's rescues
        self.usr1: list[float] = []
        self.errors: list[float] = []
        self.last_seen: dict[int, float] = {}  # pid -> time of its last record

    @property
    def world(self) -> int:
        return self.starts[0]["world"] if self.starts else 0

    @property
    def start(self) -> float:
        return min(r["t0"] for r in self.starts)

    @property
    def first_step(self) -> dict | None:
        return min(self.steps, key=lambda s: s["t1"]) if self.steps else None

    @property
    def rescues(self) -> list[dict]:
        return [s for s in self.saves if s["why"] == "rescue"]


def attempts_of(records: list[dict], alive: dict[int, float] | None = None) -> list[Attempt]:
    """Groups the records; alive (pid -> when last seen running, from
    outside) extends a process's life past its last record."""
    by_id: dict[float, Attempt] = {}
    steps: dict[float, dict[int, dict]] = defaultdict(dict)  # attempt -> step -> record
    for r in records:
        a = by_id.setdefault(r["attempt"], Attempt(r["attempt"]))
        t = r.get("t1", r.get("t", r.get("t_pg")))  # start records end at t_pg
        a.last_seen[r["pid"]] = max(a.last_seen.get(r["pid"], t), t)
        ev = r["ev"]
        if ev == "start":
            a.starts.append(r)
        elif ev == "init":
            a.inits.append(r)
        elif ev == "step":
            # Ranks step in lock-step, so one record a step: rank 0's, or,
            # when rank 0 died between the step's last collective and its
            # record, that of the lowest rank that completed the step.
            seen = steps[a.id].get(r["step"])
            if seen is None or r["rank"] < seen["rank"]:
                steps[a.id][r["step"]] = r
        elif ev == "save" and (r["rank"] == 0 or r["why"] == "rescue"):
            # All ranks save together, but a rescue (a worker whose peer
            # died saves the replicated state it holds) is made by whoever
            # survived, and rank 0 may be the one that died.
            a.saves.append(r)
        elif ev == "usr1":
            a.usr1.append(r["t"])
        elif ev == "error":
            a.errors.append(r["t"])
    # A process in several sets went on from one to the next in process
    # (--inprocess-restart): it left each but its last at its last record
    # there, not when it was last seen running.
    last_set: dict[int, float] = {}
    for a in sorted(by_id.values(), key=lambda a: a.id):  # rank 0's start: in time order
        for pid in a.last_seen:
            last_set[pid] = a.id
    for a in by_id.values():
        a.steps = sorted(steps[a.id].values(), key=lambda r: r["t1"])
        for pid in a.last_seen:
            if last_set[pid] == a.id:
                a.last_seen[pid] = max(a.last_seen[pid], (alive or {}).get(pid, 0.0))
    return sorted((a for a in by_id.values() if a.starts), key=lambda a: a.start)


def covered(intervals: list[tuple[float, float]], start: float) -> float:
    """Seconds after start inside at least one of the intervals: the
    rescues of several surviving workers overlap."""
    out, reach = 0.0, start
    for a, b in sorted(intervals):
        a = max(a, reach)
        if b > a:
            out += b - a
            reach = b
    return out


def surviving(attempts: list[Attempt]) -> tuple[dict[int, dict], list[dict]]:
    """(step number -> its surviving execution, the executions lost)."""
    latest: dict[int, dict] = {}
    lost = []
    for a in attempts:
        for s in a.steps:
            old = latest.get(s["step"])
            if old is None or s["t1"] > old["t1"]:
                if old is not None:
                    lost.append(old)
                latest[s["step"]] = s
            else:
                lost.append(s)
    return latest, lost


def recovery(event: dict, old: Attempt | None, new: Attempt, kept_ids: set[int],
             failed: int = 0) -> dict:
    """Phases from the event (te) to the end of the new workers' first step:

    - detection: te until the old workers first learn of it: a scale-event
      signal (SIGUSR1), an error in the loop or the start of a rescue save
      (a peer died; a worker may record the error only after its rescue),
      or else their last step's end (they were stopped without notice);
    - stop: from there until the old workers' last record (training on to
      an agreed step, exiting), less the checkpoint saved meanwhile;
    - checkpoint save: the old workers' saves after te (rank 0's at a stop,
      a survivor's rescue after a failure);
    - rendezvous: the old workers' last record until the first new worker
      process starts (the launcher's rendezvous and spawn);
    - restart: until every new worker has imported torch and joined its
      process group (and built the model);
    - checkpoint load, first step: until every rank loaded, then until rank
      0's first step ended.

    Beside them, "pause": the time with no step, from the old workers' last
    step's end to the new workers' first step's start (the job trains on
    through a detection and an agreed stop), and "lost_s", the training
    thrown away by a rollback: together, what the change cost the job.
    """
    te = event["t"]
    out: dict = {"event": event.get("what", event.get("action")), "t": te,
                 "world_before": old.world if old else None, "world_after": new.world}
    first = new.first_step
    load_start = max(r["t_load"] for r in new.inits)
    ready = max(r["t1"] for r in new.inits)
    if old is not None:
        signs = [t for t in old.usr1 + old.errors + [s["t0"] for s in old.rescues] if t >= te]
        last_step = max((s["t1"] for s in old.steps), default=te)
        detected = min(signs) if signs else max(te, last_step)
        old_done = max([detected] + list(old.last_seen.values()))
        saved = covered([(s["t0"], s["t1"]) for s in old.saves], te)
        lost = [s for s in old.steps if id(s) not in kept_ids]
    else:
        detected = old_done = te
        saved, lost = 0.0, []
    phases = {
        "detection": detected - te,
        "stop": max(0.0, old_done - detected - saved),
        "checkpoint save": saved,
        "rendezvous": max(0.0, new.start - old_done),
        "restart": max(0.0, load_start - max(new.start, old_done)),
        "checkpoint load": ready - load_start,
        "first step": (first["t1"] - ready) if first else None,
    }
    out["phases"] = phases
    out["total"] = (first["t1"] - te) if first else None
    out["pause"] = (max(0.0, first["t0"] - last_step)
                    if first and old is not None and old.steps else None)
    out["failed_starts"] = failed
    out["steps_lost"] = len(lost)
    out["lost_s"] = sum(s["t1"] - s["t0"] for s in lost)
    return out


def account(records: list[dict], played: list[dict], t_launch: float, t_end: float,
            samples: int, alive: dict[int, float] | None = None) -> dict:
    """The figures of one run. played: {"t" (absolute), "action", "what"} per
    event; alive: see attempts_of()."""
    attempts = attempts_of(records, alive)
    latest, lost = surviving(attempts)
    kept_ids = {id(s) for s in latest.values()}
    wall = t_end - t_launch
    intervals = [(s["t0"], s["t1"], KEPT) for s in latest.values()]
    intervals += [(s["t0"], s["t1"], LOST) for s in lost]
    for a in attempts:
        intervals += [(s["t0"], s["t1"], SAVE_LABEL.get(s["why"], SAVE_PERIODIC)) for s in a.saves]
        loads = {r["pid"]: r["t_load"] for r in a.inits}
        for r in a.starts:  # a process that never loaded started until its last record
            intervals.append((r["t0"], loads.get(r["pid"], a.last_seen[r["pid"]]), START))
        for r in a.inits:
            intervals.append((r["t_load"], r["t1"], LOAD))
            if r["rank"] == 0:
                # Not to a rescue: until it starts the workers wait on a
                # broken collective (detection), not in the loop.
                ends = [s["t1"] for s in a.steps + a.saves if s.get("why") != "rescue"]
                if ends:
                    intervals.append((r["t1"], max(ends), BETWEEN))
    breakdown = classify(intervals, t_launch, t_end)
    kept = breakdown[KEPT]
    first_step = min((s["t0"] for s in latest.values()), default=t_end)

    # Each event's recovery ends at the first set of workers that trains
    # after it; events that share that set share one recovery.
    training = [a for a in attempts if a.steps]
    recoveries, first_of = [], {}
    for ev in played:
        new = next((a for a in training if a.start > ev["t"]), None)
        base = {"event": ev.get("what", ev.get("action")), "t": ev["t"], "phases": None,
                "total": None, "steps_lost": 0, "lost_s": 0.0}
        if new is None:
            recoveries.append({**base, "note": "no new workers trained after it"})
        elif new.id in first_of:
            at = first_of[new.id]["t"] - t_launch
            recoveries.append({**base, "note": f"recovered together with the event at "
                                               f"{at:.0f} s after launch"})
        else:
            old = max((a for a in training if a.start < ev["t"]), key=lambda a: a.start, default=None)
            failed = sum(1 for a in attempts if not a.steps and ev["t"] < a.start < new.start)
            first_of[new.id] = ev
            recoveries.append(recovery(ev, old, new, kept_ids, failed))
    return {
        "wall_s": wall,
        "kept_s": kept,
        "goodput": kept / wall if wall > 0 else 0.0,
        "from_first_step_s": t_end - first_step,
        "goodput_from_first_step": kept / (t_end - first_step) if t_end > first_step else 0.0,
        "steps": len(latest),
        "steps_run": len(latest) + len(lost),
        "steps_lost": len(lost),
        "samples_per_s": samples / wall if wall > 0 else 0.0,
        "breakdown": breakdown,
        "recoveries": recoveries,
        "attempts": [{"start": a.start - t_launch, "world": a.world, "steps": len(a.steps),
                      "from_step": a.inits[0]["from_step"] if a.inits else None}
                     for a in attempts],
        "worlds": sorted({a.world for a in attempts}),
    }


def recovery_summary(recoveries: list[dict]) -> dict[str, float]:
    """Sum of each phase over the events that restarted workers."""
    out: dict[str, float] = defaultdict(float)
    for r in recoveries:
        for k, v in (r.get("phases") or {}).items():
            out[k] += v or 0.0
    return dict(out)
