"""The churn harness's trace parser and accounting (bench/churn/), on a
hand-made event log: the figures below were computed by hand. No binaries,
no timing: the benchmark itself is not run here.
"""

from __future__ import annotations

import itertools
import re
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench/churn"))
import churn_accounting as acc  # noqa: E402
import churn_trace  # noqa: E402

A, B = 100.0, 111.0  # attempt ids: rank 0's start times


def rec(ev, pid, rank, attempt, **fields):
    return {"ev": ev, "pid": pid, "rank": rank, "world": 2, "gen": 0, "attempt": attempt,
            "restart": 0, **fields}


def synthetic_log() -> list[dict]:
    """Attempt A (ranks 0, 1) runs steps 1-4 and saves after step 2; rank 1 is
    killed at 109.8 and rank 0 errors at 110; attempt B resumes from step 2,
    runs 3-5 (a 0.2 s gap before step 5) and saves at the end."""
    out = [rec("start", 1, 0, A, t0=100.0, t_pg=103.0), rec("start", 2, 1, A, t0=100.5, t_pg=103.0),
           rec("init", 1, 0, A, t_load=104.0, t1=105.0, from_step=0),
           rec("init", 2, 1, A, t_load=104.0, t1=105.0, from_step=0)]
    a_steps = [(1, 105.0, 106.0), (2, 106.0, 107.0), (3, 107.5, 108.5), (4, 108.5, 109.5)]
    for pid, rank in ((1, 0), (2, 1)):
        out += [rec("step", pid, rank, A, step=s, t0=t0, t1=t1) for s, t0, t1 in a_steps]
        out.append(rec("save", pid, rank, A, step=2, why="periodic", t0=107.0, t1=107.5))
    out.append(rec("error", 1, 0, A, t=110.0, what="RuntimeError: peer closed"))
    out += [rec("start", 3, 0, B, t0=111.0, t_pg=113.0), rec("start", 4, 1, B, t0=111.2, t_pg=113.0),
            rec("init", 3, 0, B, t_load=114.0, t1=115.0, from_step=2),
            rec("init", 4, 1, B, t_load=114.0, t1=115.0, from_step=2)]
    b_steps = [(3, 115.0, 116.0), (4, 116.0, 117.0), (5, 117.2, 118.2)]
    for pid, rank in ((3, 0), (4, 1)):
        out += [rec("step", pid, rank, B, step=s, t0=t0, t1=t1) for s, t0, t1 in b_steps]
        out.append(rec("save", pid, rank, B, step=5, why="final", t0=118.2, t1=118.7))
        out.append(rec("exit", pid, rank, B, t=118.8, how="done"))
    return out


PLAYED = [{"t": 109.8, "action": "kill-worker", "what": "worker killed"},
          {"t": 117.5, "action": "join", "what": "node 3 joins"}]


def test_only_the_last_execution_of_each_step_counts_as_goodput():
    res = acc.account(synthetic_log(), PLAYED, t_launch=100.0, t_end=119.0, samples=240)
    assert res["steps"] == 5 and res["steps_run"] == 7 and res["steps_lost"] == 2
    assert res["kept_s"] == pytest.approx(5.0)
    assert res["wall_s"] == pytest.approx(19.0)
    assert res["goodput"] == pytest.approx(5.0 / 19.0)
    assert res["goodput_from_first_step"] == pytest.approx(5.0 / 14.0)
    assert res["samples_per_s"] == pytest.approx(240 / 19.0)


def test_every_second_of_the_wall_time_lands_in_exactly_one_category():
    res = acc.account(synthetic_log(), PLAYED, t_launch=100.0, t_end=119.0, samples=240)
    expected = {acc.KEPT: 5.0, acc.LOST: 2.0, acc.SAVE_PERIODIC: 0.5, acc.SAVE_STOP: 0.0,
                acc.SAVE_RESCUE: 0.0, acc.SAVE_FINAL: 0.5, acc.LOAD: 2.0, acc.START: 7.0,
                acc.BETWEEN: 0.2, acc.IDLE: 1.8}
    assert res["breakdown"] == pytest.approx(expected)
    assert sum(res["breakdown"].values()) == pytest.approx(res["wall_s"])


def test_a_failure_s_recovery_is_split_into_phases_that_add_up_to_its_total():
    res = acc.account(synthetic_log(), PLAYED, t_launch=100.0, t_end=119.0, samples=240)
    r = res["recoveries"][0]
    assert r["phases"] == pytest.approx({"detection": 0.2, "stop": 0.0, "checkpoint save": 0.0,
                                         "rendezvous": 1.0, "restart": 3.0,
                                         "checkpoint load": 1.0, "first step": 1.0})
    assert r["total"] == pytest.approx(6.2)
    assert r["steps_lost"] == 2 and r["lost_s"] == pytest.approx(2.0)
    assert (r["world_before"], r["world_after"]) == (2, 2)


def test_an_event_followed_by_no_new_workers_has_no_recovery():
    res = acc.account(synthetic_log(), PLAYED, t_launch=100.0, t_end=119.0, samples=240)
    r = res["recoveries"][1]
    assert r["phases"] is None and r["total"] is None and "no new workers" in r["note"]


def test_a_stop_at_an_agreed_step_loses_nothing_and_its_save_is_its_own_phase():
    log = [rec("start", 1, 0, A, t0=100.0, t_pg=101.0),
           rec("init", 1, 0, A, t_load=102.0, t1=103.0, from_step=0),
           rec("step", 1, 0, A, step=1, t0=103.0, t1=104.0),
           rec("usr1", 1, 0, A, t=104.5),
           rec("step", 1, 0, A, step=2, t0=104.0, t1=105.0),
           rec("save", 1, 0, A, step=2, why="resize", t0=105.0, t1=105.4),
           rec("exit", 1, 0, A, t=105.5, how="resize"),
           rec("start", 2, 0, 106.0, t0=106.0, t_pg=107.0),
           rec("init", 2, 0, 106.0, t_load=108.0, t1=108.5, from_step=2),
           rec("step", 2, 0, 106.0, step=3, t0=108.5, t1=109.5)]
    res = acc.account(log, [{"t": 104.2, "action": "join", "what": "node 2 joins"}],
                      t_launch=100.0, t_end=110.0, samples=144)
    r = res["recoveries"][0]
    assert r["steps_lost"] == 0 and res["steps_lost"] == 0
    assert r["phases"] == pytest.approx({"detection": 0.3, "stop": 0.6, "checkpoint save": 0.4,
                                         "rendezvous": 0.5, "restart": 2.0,
                                         "checkpoint load": 0.5, "first step": 1.0})
    assert r["total"] == pytest.approx(5.3)
    assert res["breakdown"][acc.SAVE_STOP] == pytest.approx(0.4)


def test_a_trace_names_its_job_and_lists_events_in_time_order():
    t = churn_trace.parse("nnodes 2:4\nnodes 3  # start\nsamples 960\n\n"
                          "10 join\n20 release 1\n20 kill 2\n30.5 kill-worker\n40 scale 4\n", "t")
    assert (t.nnodes, t.nodes, t.samples) == ((2, 4), 3, 960)
    assert [(e.t, e.action, e.arg) for e in t.events] == [
        (10, "join", None), (20, "release", 1), (20, "kill", 2), (30.5, "kill-worker", None),
        (40, "scale", 4)]


@pytest.mark.parametrize("text, why", [
    ("nodes 3\nsamples 9\n", "missing 'nnodes'"),
    ("nnodes 2:4\nnodes 5\nsamples 9\n", "outside nnodes"),
    ("nnodes 2:4\nnodes 3\nsamples 9\n10 join\n5 leave\n", "time order"),
    ("nnodes 2:4\nnodes 3\nsamples 9\n10 reboot\n", "expected an action"),
    ("nnodes 2:4\nnodes 3\nsamples 9\n10 release\n", "needs a count"),
    ("nnodes 2:4\nnodes 3\nsamples 9\n10 join 2\n", "too many arguments"),
    ("nnodes 2:4\nnodes 3\nsamples 9\n10 kill node2\n", "positive integer"),
])
def test_a_malformed_trace_is_refused_naming_the_line(text, why):
    with pytest.raises(churn_trace.TraceError, match=why):
        churn_trace.parse(text, "bad.trace")


def test_a_repeated_trace_plays_its_events_again_each_period_for_as_long_as_asked():
    t = churn_trace.parse("nnodes 2:4\nnodes 3\nsamples 960\nrepeat 60  # a minute\n"
                          "10 join\n30 leave\n50 kill 2\n", "t")
    assert t.repeat == 60
    assert t.changes_per_minute() == pytest.approx(3.0)  # three events a period, not in 50 s
    expected = [(10, "join", None, 0), (30, "leave", None, 0), (50, "kill", 2, 0),
                (70, "join", None, 1), (90, "leave", None, 1), (110, "kill", 2, 1),
                (130, "join", None, 2)]
    assert [(e.t, e.action, e.arg, e.cycle) for e in t.timeline(until=130)] == expected
    # Without a horizon it goes on: the harness takes events until the job ends.
    assert [(e.t, e.action, e.arg, e.cycle) for e in itertools.islice(t.timeline(), 7)] == expected
    assert [e.line for e in t.timeline(until=130)] == [5, 6, 7, 5, 6, 7, 5]


def test_a_trace_without_repeat_plays_its_events_once():
    t = churn_trace.parse("nnodes 2:4\nnodes 3\nsamples 960\n10 join\n30 leave\n", "t")
    assert t.repeat is None
    assert [(e.t, e.cycle) for e in t.timeline()] == [(10, 0), (30, 0)]
    assert [e.t for e in t.timeline(until=20)] == [10]
    assert t.changes_per_minute() == pytest.approx(4.0)


@pytest.mark.parametrize("lines, why", [
    ("repeat 0\n10 join", "bad.trace:4: the repeat must be a positive number of seconds: 'repeat 0'"),
    ("repeat -60\n10 join", "bad.trace:4: the repeat must be a positive number of seconds"),
    ("repeat hourly\n10 join", "bad.trace:4: the repeat must be a positive number of seconds"),
    ("repeat inf\n10 join", "bad.trace:4: the repeat must be a positive number of seconds"),
    ("repeat nan\n10 join", "bad.trace:4: the repeat must be a positive number of seconds"),
    ("repeat 60 s\n10 join", "bad.trace:4: 'repeat' takes one value"),
    ("repeat 60\n10 join\nrepeat 90", "bad.trace:6: 'repeat' given twice"),
    ("repeat 60", "bad.trace:4: 'repeat' needs events to repeat"),
    ("repeat 50\n10 join\n50 leave",
     "bad.trace:4: the repeat must be longer than the last event's time (50 s, line 6): 'repeat 50'"),
    ("10 join\n50 leave\nrepeat 40  # too short",
     "bad.trace:6: the repeat must be longer than the last event's time (50 s, line 5)"),
])
def test_a_bad_repeat_is_refused_naming_its_line(lines, why):
    with pytest.raises(churn_trace.TraceError, match=re.escape(why)):
        churn_trace.parse(f"nnodes 2:4\nnodes 3\nsamples 9\n{lines}\n", "bad.trace")


def rescue_log(rescuers: tuple[int, ...], error_first: bool) -> list[dict]:
    """World 3. Attempt A runs steps 1-4 and saves after step 2; rank 2 is
    killed at 109.8; the survivors in `rescuers` save a rescue of step 4
    (0.6 s), before or after every survivor records its error; attempt C
    resumes from step 4, runs 5 and 6 (a 0.2 s gap before 6) and saves at
    the end."""
    C = 111.0
    out = []
    for rank in range(3):
        pid = rank + 1
        out += [rec("start", pid, rank, A, world=3, t0=100.0 + 0.5 * rank, t_pg=103.0),
                rec("init", pid, rank, A, world=3, t_load=104.0, t1=105.0, from_step=0)]
        out += [rec("step", pid, rank, A, world=3, step=s, t0=t0, t1=t1)
                for s, t0, t1 in [(1, 105.0, 106.0), (2, 106.0, 107.0), (3, 107.5, 108.5),
                                  (4, 108.5, 109.5)]]
        out.append(rec("save", pid, rank, A, world=3, step=2, why="periodic", t0=107.0, t1=107.5))
    for rank in (0, 1):
        error = rec("error", rank + 1, rank, A, world=3, t=110.0 if error_first else 110.7,
                    what="RuntimeError: Connection closed by peer")
        t0 = 110.1 if error_first else 110.0
        rescue = [rec("save", rank + 1, rank, A, world=3, step=4, why="rescue", t0=t0,
                      t1=t0 + 0.6)] if rank in rescuers else []
        out += [error, *rescue] if error_first else [*rescue, error]
    for rank in range(3):
        pid = rank + 4
        out += [rec("start", pid, rank, C, world=3, t0=C + 0.2 * rank, t_pg=113.0),
                rec("init", pid, rank, C, world=3, t_load=114.0, t1=115.0, from_step=4),
                rec("step", pid, rank, C, world=3, step=5, t0=115.0, t1=116.0),
                rec("step", pid, rank, C, world=3, step=6, t0=116.2, t1=117.2),
                rec("save", pid, rank, C, world=3, step=6, why="final", t0=117.2, t1=117.7),
                rec("exit", pid, rank, C, world=3, t=117.8, how="done")]
    return out


@pytest.mark.parametrize("error_first", [False, True])
@pytest.mark.parametrize("rescuers", [(0,), (1,), (0, 1)])
def test_a_survivor_s_rescue_save_is_its_own_category_and_the_steps_it_kept_are_not_lost(
        rescuers, error_first):
    played = [{"t": 109.8, "action": "kill-worker", "what": "node 3's worker killed (SIGKILL)"}]
    res = acc.account(rescue_log(rescuers, error_first), played, t_launch=100.0, t_end=118.0,
                      samples=288)
    # Resumed at step 4, the rescue's: steps 1-4 of A survive, none is lost.
    assert res["steps"] == 6 and res["steps_run"] == 6 and res["steps_lost"] == 0
    assert [a["from_step"] for a in res["attempts"]] == [0, 4]
    # Several survivors' rescues overlap: 0.6 s. Waiting on the broken
    # collective before the rescue (109.5-110.0 or -110.1) is idle, not the loop.
    expected = {acc.KEPT: 6.0, acc.LOST: 0.0, acc.SAVE_PERIODIC: 0.5, acc.SAVE_STOP: 0.0,
                acc.SAVE_RESCUE: 0.6, acc.SAVE_FINAL: 0.5, acc.LOAD: 2.0, acc.START: 7.0,
                acc.BETWEEN: 0.2, acc.IDLE: 1.2}
    assert res["breakdown"] == pytest.approx(expected)
    r = res["recoveries"][0]
    # Detected at 110.0 (the error, or the rescue's start when the error
    # comes after it); the old workers are done at 110.7.
    assert r["phases"] == pytest.approx({"detection": 0.2, "stop": 0.1, "checkpoint save": 0.6,
                                         "rendezvous": 0.3, "restart": 3.0,
                                         "checkpoint load": 1.0, "first step": 1.0})
    assert r["total"] == pytest.approx(6.2)
    assert r["steps_lost"] == 0 and r["lost_s"] == 0.0
    assert (r["world_before"], r["world_after"]) == (3, 3)


def test_a_step_that_rank_0_died_in_after_its_last_collective_counts_from_another_rank():
    # Rank 0 completed step 4's all-reduce with the others, then died before
    # its record; the survivors recorded step 4 and rescued it.
    log = [r for r in rescue_log((1,), error_first=False)
           if not (r["ev"] == "step" and r["rank"] == 0 and r["attempt"] == A and r["step"] == 4)]
    played = [{"t": 109.8, "action": "kill-worker", "what": "node 1's worker killed (SIGKILL)"}]
    res = acc.account(log, played, t_launch=100.0, t_end=118.0, samples=288)
    assert res["steps"] == 6 and res["steps_run"] == 6 and res["steps_lost"] == 0
    assert res["breakdown"][acc.KEPT] == pytest.approx(6.0)


def test_workers_cut_short_by_a_second_event_fall_inside_one_shared_recovery():
    # A trains; a join at 104.2 starts C (world 3), which a leave at 106.5
    # breaks before its first step; D trains at world 2 from step 1.
    C, D = 105.0, 108.0
    log = [rec("start", 1, 0, A, t0=100.0, t_pg=101.0),
           rec("init", 1, 0, A, t_load=102.0, t1=103.0, from_step=0),
           rec("step", 1, 0, A, step=1, t0=103.0, t1=104.0),
           rec("save", 1, 0, A, step=1, why="resize", t0=104.3, t1=104.5),
           rec("start", 2, 0, C, t0=105.0, t_pg=106.0),
           rec("error", 2, 0, C, t=107.0, what="RuntimeError: Connection closed by peer"),
           rec("start", 3, 0, D, t0=108.0, t_pg=109.0),
           rec("init", 3, 0, D, t_load=109.5, t1=110.0, from_step=1),
           rec("step", 3, 0, D, step=2, t0=110.0, t1=111.0)]
    played = [{"t": 104.2, "action": "join", "what": "node 3 joins"},
              {"t": 106.5, "action": "leave", "what": "node 3 leaves"}]
    res = acc.account(log, played, t_launch=100.0, t_end=111.0, samples=96)
    first, second = res["recoveries"]
    assert first["failed_starts"] == 1
    assert first["total"] == pytest.approx(111.0 - 104.2)
    assert first["phases"]["rendezvous"] == pytest.approx(108.0 - 104.5)
    assert second["phases"] is None and "together with the event at 4 s" in second["note"]
    # C's start up to its error is worker start time, not idle time.
    assert res["breakdown"][acc.START] == pytest.approx(2.0 + 2.0 + 1.5)
    assert [a["world"] for a in res["attempts"]] == [2, 2, 2]


def test_a_worker_seen_alive_after_its_last_record_is_still_stopping():
    res = acc.account(synthetic_log(), PLAYED, t_launch=100.0, t_end=119.0, samples=240,
                      alive={1: 110.4, 3: 90.0})
    phases = res["recoveries"][0]["phases"]
    assert phases["stop"] == pytest.approx(0.4)
    assert phases["rendezvous"] == pytest.approx(0.6)
    assert res["recoveries"][0]["total"] == pytest.approx(6.2)


@pytest.mark.parametrize("last", ["park", "error"])
def test_a_round_re_formed_in_process_is_a_new_set_whose_survivors_stop_when_they_park(last):
    """train_inprocess.py's records: round A (pids 1, 2) parks after step 3
    for a join at 104.0 (or its collectives fail: the script records the
    error, the SDK parks); round B keeps pids 1 and 2 (their start is the
    end of the park, 104.6) and adds pid 3, a new process started at 104.2;
    the state goes out from 105.0 to 105.3. The harness saw pids 1 and 2
    alive to the end: they were never gone."""
    B2 = 104.2  # rank 0 of round B is the new process
    out = []
    for pid, rank in ((1, 0), (2, 1)):
        out += [rec("start", pid, rank, A, t0=100.0, t_pg=101.0),
                rec("init", pid, rank, A, t_load=101.0, t1=101.5, from_step=0)]
        out += [rec("step", pid, rank, A, step=s, t0=t0, t1=t1)
                for s, t0, t1 in [(1, 101.5, 102.5), (2, 102.5, 103.5), (3, 103.5, 104.3)]]
        out += [rec("usr1", pid, rank, A, t=104.05),
                rec("exit", pid, rank, A, t=104.4, how="park") if last == "park"
                else rec("error", pid, rank, A, t=104.4, what="RuntimeError: Connection closed")]
    for pid, rank, t0 in ((3, 0, 104.2), (1, 1, 104.6), (2, 2, 104.6)):
        out += [rec("start", pid, rank, B2, world=3, t0=t0, t_pg=105.0),
                rec("init", pid, rank, B2, world=3, t_load=105.0, t1=105.3, from_step=3),
                rec("step", pid, rank, B2, world=3, step=4, t0=105.3, t1=106.0),
                rec("exit", pid, rank, B2, world=3, t=106.1, how="done")]
    played = [{"t": 104.0, "action": "join", "what": "node 3 joins"}]
    res = acc.account(out, played, t_launch=100.0, t_end=106.2, samples=192,
                      alive={1: 106.2, 2: 106.2, 3: 106.2})
    assert res["steps"] == 4 and res["steps_lost"] == 0
    assert [(a["world"], a["from_step"]) for a in res["attempts"]] == [(2, 0), (3, 3)]
    r = res["recoveries"][0]
    # Detected at the signal (104.05), parked at 104.4; the new set began
    # at 104.2 (the joiner): no rendezvous left; the process group until
    # 105.0, the state until 105.3, the first step until 106.0.
    assert r["phases"] == pytest.approx({"detection": 0.05, "stop": 0.35, "checkpoint save": 0.0,
                                         "rendezvous": 0.0, "restart": 0.6,
                                         "checkpoint load": 0.3, "first step": 0.7})
    assert r["total"] == pytest.approx(2.0)
    # No step from the old set's last (104.3) to the new set's first (105.3).
    assert r["pause"] == pytest.approx(1.0) and r["lost_s"] == 0.0


def test_several_runs_report_median_goodput_and_the_tables_of_each_launcher_s_median_run():
    sys.path.insert(0, str(REPO / "bench"))
    import churn_bench

    def run(goodput, first):
        return {"goodput": goodput, "goodput_from_first_step": first}

    e = [run(0.93, 0.96), run(0.95, 0.95), run(0.91, 0.97)]
    t = [run(0.60, 0.70), run(0.66, 0.64)]
    assert churn_bench.median_run(e) is e[0]
    assert churn_bench.median_run(t) is t[0]  # the lower middle of an even count
    med = churn_bench.headline({"elasticrun": e[0], "torchrun": t[0]},
                               {"elasticrun": e, "torchrun": t})
    # Each figure's own median, not the median run's figures.
    assert med["elasticrun"] == {"goodput": 0.93, "goodput_from_first_step": 0.96}
    assert med["torchrun"] == pytest.approx({"goodput": 0.63, "goodput_from_first_step": 0.67})
    # One run: its figures.
    assert churn_bench.headline({"torchrun": t[1]}, None) == {"torchrun": t[1]}
