"""Churn traces: what happens to a running job, and when (format in README.md).

    nnodes 2:4          # --nnodes of every agent, both launchers
    nodes 3             # agents started at the beginning: nodes 1..3
    samples 130000      # the job trains this many samples, then ends
    repeat 360          # optional: the events again every 360 s while the job runs
    30  join            # seconds after the job's first training step
    90  release 1
    150 kill-worker
    210 scale 4
    270 leave
    330 kill 2

Pure parsing, no I/O beyond the text: the integration suite and the harness
share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

ACTIONS = {
    # action: (argument, required) — the argument is a node number for the
    # first four (optional: the newest node that runs a worker), a count for
    # the last two.
    "join": (None, False),
    "leave": ("node", False),
    "kill": ("node", False),
    "kill-worker": ("node", False),
    "release": ("count", True),
    "scale": ("count", True),
}


class TraceError(ValueError):
    pass


HEADER = ("nnodes", "nodes", "samples", "repeat")


@dataclass(frozen=True)
class Event:
    t: float
    action: str
    arg: int | None = None
    line: int = 0
    cycle: int = 0  # 0: as written; c: the c-th repeat, t shifted by c * Trace.repeat

    def describe(self) -> str:
        return f"{self.action} {self.arg}" if self.arg is not None else self.action


@dataclass
class Trace:
    name: str
    nnodes: tuple[int, int]
    nodes: int
    samples: int
    events: list[Event] = field(default_factory=list)
    repeat: float | None = None  # seconds between the starts of two cycles of the events

    def changes_per_minute(self) -> float:
        """Events per minute of training: over one cycle when the trace
        repeats, else over the time of the last event."""
        if not self.events:
            return 0.0
        period = self.repeat or max(e.t for e in self.events)
        return len(self.events) / (period / 60.0 or 1.0)

    def timeline(self, until: float = math.inf) -> Iterator[Event]:
        """The events to play, in time order, up to `until` seconds
        (inclusive): the trace's, then, when it repeats, each later cycle's
        shifted by `repeat` seconds, without end unless `until` is finite.
        Lazy: the harness does not know when the job will end."""
        cycle = 0
        while True:
            for e in self.events:
                t = e.t + cycle * (self.repeat or 0.0)
                if t > until:
                    return
                yield replace(e, t=t, cycle=cycle)
            if not (self.repeat and self.events):
                return
            cycle += 1


def parse(text: str, name: str = "trace") -> Trace:
    header: dict[str, str] = {}
    header_line: dict[str, tuple[int, str]] = {}  # key -> (line number, the line) for errors
    events: list[Event] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()

        def fail(why: str) -> TraceError:
            return TraceError(f"{name}:{no}: {why}: {raw.strip()!r}")

        if words[0] in HEADER:
            if len(words) != 2:
                raise fail(f"'{words[0]}' takes one value")
            if words[0] in header:
                raise fail(f"'{words[0]}' given twice")
            header[words[0]] = words[1]
            header_line[words[0]] = (no, raw.strip())
            continue
        try:
            t = float(words[0])
        except ValueError:
            raise fail(f"expected a time in seconds or {'/'.join(HEADER)}") from None
        if t < 0 or t != t:
            raise fail("the time must be a non-negative number")
        if len(words) < 2 or words[1] not in ACTIONS:
            raise fail(f"expected an action ({', '.join(ACTIONS)})")
        kind, required = ACTIONS[words[1]]
        if len(words) > 3 or (kind is None and len(words) == 3):
            raise fail("too many arguments")
        arg = None
        if len(words) == 3:
            if not words[2].isdigit() or int(words[2]) < 1:
                raise fail(f"the {kind} must be a positive integer")
            arg = int(words[2])
        elif required:
            raise fail(f"'{words[1]}' needs a {kind}")
        if events and t < events[-1].t:
            raise fail("events must be in time order")
        events.append(Event(t, words[1], arg, no))
    for key in ("nnodes", "nodes", "samples"):
        if key not in header:
            raise TraceError(f"{name}: missing '{key}' line")
    try:
        lo, _, hi = header["nnodes"].partition(":")
        nnodes = (int(lo), int(hi or lo))
        nodes, samples = int(header["nodes"]), int(header["samples"])
    except ValueError:
        raise TraceError(f"{name}: nnodes is MIN:MAX, nodes and samples are integers") from None
    if not 1 <= nnodes[0] <= nnodes[1]:
        raise TraceError(f"{name}: nnodes {header['nnodes']} is not 1 <= MIN <= MAX")
    if not nnodes[0] <= nodes <= nnodes[1]:
        raise TraceError(f"{name}: nodes {nodes} is outside nnodes {header['nnodes']}")
    if samples < 1:
        raise TraceError(f"{name}: samples must be positive")
    repeat = None
    if "repeat" in header:
        no, raw = header_line["repeat"]
        where = f"{name}:{no}"
        try:
            repeat = float(header["repeat"])
        except ValueError:
            repeat = math.nan
        if not 0 < repeat < math.inf:
            raise TraceError(f"{where}: the repeat must be a positive number of seconds: {raw!r}")
        if not events:
            raise TraceError(f"{where}: 'repeat' needs events to repeat: {raw!r}")
        # Cycles must not overlap: with a shorter period the next cycle's
        # first events would come before (or, at 0, with) this one's last.
        if repeat <= events[-1].t:
            raise TraceError(f"{where}: the repeat must be longer than the last event's time "
                             f"({events[-1].t:g} s, line {events[-1].line}): {raw!r}")
    return Trace(name, nnodes, nodes, samples, events, repeat)
