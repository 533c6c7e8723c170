"""elasticrun.inprocess.at_round_end(): what holds something of a round is
told before the round's process group goes, and is not kept alive by it."""

from __future__ import annotations

import gc

from elasticrun import inprocess


class NoGroup:
    """torch.distributed with no process group: _leave_round() does nothing."""

    @staticmethod
    def is_initialized() -> bool:
        return False


class Holder:
    def __init__(self, fail: bool = False):
        self.calls: list[bool] = []
        self.fail = fail
        inprocess.at_round_end(self.ended)

    def ended(self, failed: bool) -> None:
        self.calls.append(failed)
        if self.fail:
            raise RuntimeError("cannot let go")


def test_every_live_holder_hears_of_each_round_end_with_whether_it_failed(capsys):
    a, b = Holder(fail=True), Holder()
    inprocess._end_round(NoGroup, failed=False)
    inprocess._end_round(NoGroup, failed=True)
    # One holder's error is reported and does not keep the others from hearing.
    assert a.calls == [False, True] and b.calls == [False, True]
    assert "cannot let go" in capsys.readouterr().err


def test_a_holder_that_is_gone_is_dropped_not_kept_alive():
    gc.collect()
    inprocess._end_round(NoGroup, failed=False)  # drops those of earlier tests
    before = len(inprocess._round_end)
    c = Holder()
    assert len(inprocess._round_end) == before + 1
    del c
    gc.collect()
    inprocess._end_round(NoGroup, failed=False)
    assert len(inprocess._round_end) == before
