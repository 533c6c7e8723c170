"""elasticrun._leave: a leave signal that reaches the worker as well as its
agent (SLURM signals every process of a step) waits for the agreed stop
when the agent publishes one, and otherwise does what it did before."""

from __future__ import annotations

import os
import signal
import time

import pytest

from elasticrun import _leave
from elasticrun._control import Event, EventKind


class FakeBlock:
    """The one read the handler makes: the block's current event."""

    def __init__(self, kind=EventKind.NONE, stop_step=-1):
        self.event = Event(1, 1 if kind else 0, stop_step, kind, -1, 0, "")

    def snapshot_event(self):
        return 0, self.event


@pytest.fixture
def earlier(monkeypatch):
    """SIGTERM's handler before attach(): it records what reaches it."""
    monkeypatch.setenv(_leave.LEAVE_SIGNALS_ENV, f"{int(signal.SIGTERM)},{int(signal.SIGUSR1)},x")
    monkeypatch.setattr(_leave, "WAIT_S", 0.2)
    calls = []
    before = signal.signal(signal.SIGTERM, lambda n, f: calls.append(time.monotonic()))
    yield calls
    signal.signal(signal.SIGTERM, before)


def sigterm() -> float:
    t = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)
    return t


def test_the_agents_signals_less_sigusr1_are_handled(earlier):
    assert _leave.leave_signals() == [signal.SIGTERM]


def test_a_signal_the_agent_stops_the_job_for_is_waited_out_and_a_second_one_passes_on(earlier):
    leave = _leave.LeaveSignals(FakeBlock(EventKind.SCALE_DOWN, stop_step=17), "0")
    leave.install()
    sigterm()
    assert leave.deferred == signal.SIGTERM
    assert earlier == []
    sigterm()
    assert len(earlier) == 1


def test_after_a_failure_the_signal_passes_on_at_once(earlier):
    leave = _leave.LeaveSignals(FakeBlock(EventKind.RESTART), "0")
    leave.install()
    sent = sigterm()
    assert leave.deferred is None
    assert len(earlier) == 1 and earlier[0] - sent < _leave.WAIT_S


def test_with_no_stop_from_the_agent_the_signal_passes_on_after_the_wait(earlier):
    leave = _leave.LeaveSignals(FakeBlock(), "0")
    leave.install()
    sent = sigterm()
    assert leave.deferred is None
    assert len(earlier) == 1 and earlier[0] - sent >= _leave.WAIT_S
