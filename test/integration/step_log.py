"""The step log of examples/python/train_elastic.py, train_elastic.cpp and
train_fsdp.py (--log or --step-log DIR): one JSON line per step in
DIR/steps.rank<R>.jsonl, a rank's lines across generations in one file;
train_fsdp.py's rank 0 also keeps DIR/state.jsonl, digests of the state it
loaded and saved. Read here, in one place; a line still being written (no
newline yet) is not read."""

from __future__ import annotations

import json
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]


def by_rank(log: Path) -> dict[int, list[dict]]:
    """Each rank's lines in the order written."""
    return {int(path.name.split(".")[1].removeprefix("rank")): _lines(path)
            for path in log.glob("steps.rank*.jsonl")}


def by_step(log: Path) -> dict[int, list[dict]]:
    """Every rank's line of each step, by step, in rank order, each with its "rank"."""
    out: dict[int, list[dict]] = {}
    for rank, lines in sorted(by_rank(log).items()):
        for entry in lines:
            out.setdefault(entry["step"], []).append({**entry, "rank": rank})
    return out


def states(log: Path) -> list[dict]:
    """train_fsdp.py's state digests in the order written: {"what": "loaded"
    or "saved", "step", "gen", "world", "digest"}."""
    path = log / "state.jsonl"
    return _lines(path) if path.exists() else []
