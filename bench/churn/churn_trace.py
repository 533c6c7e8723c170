"""Churn traces: what happens to a running job, and when (format in README.md).

    nnodes 2:4          # --nnodes of every agent, both launchers
    nodes 3             # agents started at the beginning: nodes 1..3
    samples 130000      # the job trains this many samples, then ends
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

from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Event:
    t: float
    action: str
    arg: int | None = None
    line: int = 0

    def describe(self) -> str:
        return f"{self.action} {self.arg}" if self.arg is not None else self.action


@dataclass
class Trace:
    name: str
    nnodes: tuple[int, int]
    nodes: int
    samples: int
    events: list[Event] = field(default_factory=list)

    def changes_per_minute(self) -> float:
        if not self.events:
            return 0.0
        return len(self.events) / (max(e.t for e in self.events) / 60.0 or 1.0)


def parse(text: str, name: str = "trace") -> Trace:
    header: dict[str, str] = {}
    events: list[Event] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()

        def fail(why: str) -> TraceError:
            return TraceError(f"{name}:{no}: {why}: {raw.strip()!r}")

        if words[0] in ("nnodes", "nodes", "samples"):
            if len(words) != 2:
                raise fail(f"'{words[0]}' takes one value")
            if words[0] in header:
                raise fail(f"'{words[0]}' given twice")
            header[words[0]] = words[1]
            continue
        try:
            t = float(words[0])
        except ValueError:
            raise fail("expected a time in seconds or nnodes/nodes/samples") from None
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
    return Trace(name, nnodes, nodes, samples, events)
