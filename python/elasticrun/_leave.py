"""A leave signal that reaches the worker as well as its agent.

The agent of an elastic job turns a handled signal (--signals-to-handle:
SIGTERM, ...) into a graceful leave: the round ends and every rank stops
at the step the nodes agree on, after its checkpoint. SLURM, though,
signals every process of a job step (scancel, a preemption, --signal
without B:), so the workers get the same SIGTERM at the same moment, and
Python's default action kills them before the agreed step. The agent
names the signals it treats so in ELASTICRUN_LEAVE_SIGNALS; attach()
installs this handler for them, which

- waits up to WAIT_S for the agent to publish the round's end in the
  control block: a stop at an agreed step (any event but a failure) means
  the signal is the agent's to handle, and the worker goes on to that
  step, where elastic_event_detected() is True;
- otherwise (no such event, or the round ended by a failure, after which
  the agent sends --shutdown-signal to stop its workers) does what the
  signal did before attach(): the earlier handler, or the default action;
- does that at once for a second signal while one is deferred: a repeated
  signal still ends the process, as when the agent, given no stop within
  --graceful-shutdown-timeout, forwards the signal itself.

SIGUSR1 is the SDK's own (the scale event's signal) and never deferred."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Optional

from ._control import ControlBlock
from ._release import failed

LEAVE_SIGNALS_ENV = "ELASTICRUN_LEAVE_SIGNALS"
WAIT_S = 1.0
POLL_S = 0.005


def leave_signals() -> list[int]:
    """The signals ELASTICRUN_LEAVE_SIGNALS names, less SIGUSR1; [] when unset."""
    out = []
    for part in os.environ.get(LEAVE_SIGNALS_ENV, "").split(","):
        try:
            signum = int(part)
        except ValueError:
            continue
        if signum != signal.SIGUSR1 and signum not in out:
            out.append(signum)
    return out


class LeaveSignals:
    def __init__(self, block: ControlBlock, rank: str):
        self._block = block
        self._rank = rank
        self._previous: dict[int, object] = {}
        self.deferred: Optional[int] = None  # the signal this worker waits out

    def install(self) -> None:
        """From the main thread (attach())."""
        for signum in leave_signals():
            try:
                self._previous[signum] = signal.signal(signum, self._on_signal)
            except (OSError, ValueError):  # not a signal Python may catch
                continue

    def _on_signal(self, signum: int, frame) -> None:
        if self.deferred is None and self._agent_takes_it():
            self.deferred = signum
            print(f"elasticrun: rank {self._rank}: {signal.Signals(signum).name}: the agent "
                  "stops the job at an agreed step; going on to it", file=sys.stderr, flush=True)
            return
        self._pass_on(signum, frame)

    def _agent_takes_it(self) -> bool:
        deadline = time.monotonic() + WAIT_S
        while True:
            # Not read_event(): the handler may run inside the main thread's own read.
            _, event = self._block.snapshot_event()
            if failed(event):
                return False
            if event.pending:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)

    def _pass_on(self, signum: int, frame) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
