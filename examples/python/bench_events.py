"""Timing records for bench/churn/, written by train_elastic.py and
train_inprocess.py with --events DIR; nothing is written without it.

Each process appends to DIR/events.<pid>.jsonl, one JSON object a line, all
times time.time():

- "start": a set of workers begins: t0 (the process's start, or for a
  worker that re-forms in process the end of its park) and t_pg (its
  process group ready). Every record from here on carries rank, world
  size, generation, restart count and "attempt": rank 0's t0, shared by
  all ranks of one set of workers;
- "init": t_load (the checkpoint load, or the state from a peer, begun)
  and t1 (training about to begin), from_step;
- "step": t0 and t1 of each optimizer step;
- "save": each checkpoint (why: periodic, resize, final or rescue; for one
  written in the background, the time the loop spent on it: copying);
- "usr1": the agent's scale-event signal arrived;
- "error": the training loop raised (e.g. a peer died in a collective);
- "exit": how the set of workers ended for this process (done, resize,
  park: it waits in process for the next round).

bench/churn/churn_accounting.py reads them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


class EventLog:
    """One process's timing records; a no-op without a directory."""

    def __init__(self, directory: Path | None):
        self.file = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self.file = open(directory / f"events.{os.getpid()}.jsonl", "a", buffering=1)
        self.fields: dict = {"pid": os.getpid()}
        self.usr1: list[float] = []

    @property
    def on(self) -> bool:
        return self.file is not None

    def __call__(self, ev: str, **fields) -> None:
        if self.file is not None:
            # The signal handler only notes the time: writing from it could
            # re-enter a write in progress.
            while self.usr1:
                self.file.write(json.dumps({"ev": "usr1", **self.fields, "t": self.usr1.pop(0)}) + "\n")
            self.file.write(json.dumps({"ev": ev, **self.fields, **fields}) + "\n")

    def on_usr1(self) -> None:
        """Notes SIGUSR1 through a handler installed before elasticrun.attach(),
        which chains to it; the SDK's handling is unchanged."""
        if self.file is not None:
            signal.signal(signal.SIGUSR1, lambda *_: self.usr1.append(time.time()))

    def begin(self, rank: int, world: int, generation: int, restart: int, t0: float,
              t_pg: float) -> None:
        """The "start" record of a set of workers. Agrees on the attempt id
        (rank 0's t0) with one all-reduce over the current process group,
        only when logging."""
        if self.file is None:
            return
        import torch
        import torch.distributed as dist

        t = torch.tensor([t0 if rank == 0 else 0.0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.fields.update(rank=rank, world=world, gen=generation, attempt=t.item(),
                           restart=restart)
        self("start", t0=t0, t_pg=t_pg)
