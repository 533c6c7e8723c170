"""The control block between the C++ agent side and the Python worker SDK.

`control_tool` (test/tools/control_tool.cpp) plays the agent through
control::ControlBlock; real Python processes importing `elasticrun` (from
python/, as a worker would after `pip install`) play the workers. Each side
reads what the other wrote, in the layout of docs/protocol.md.

Binary: $CONTROL_TOOL (CTest sets it); by hand it defaults to
build/dev/test/control_tool.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, STARTUP_TIMEOUT_S, _binary, venv_env

SDK = REPO / "python"
TOOL_TIMEOUT_S = 30
WORKER_TIMEOUT_S = 120  # a torch import on a loaded 2-core machine; bounds hangs only
# A distributed job: two torch imports and a gloo rendezvous, side by side.
DIST_TIMEOUT_S = 240


@pytest.fixture(scope="session")
def control_tool() -> Path:
    return _binary("CONTROL_TOOL", "build/dev/test/control_tool")


class Tool:
    def __init__(self, procs, binary: Path):
        self.procs = procs
        self.binary = binary

    def __call__(self, *args, expect_rc: int = 0):
        """Runs control_tool; returns its JSON output (None when it prints none)."""
        proc = self.procs.run([self.binary, *args], f"control_tool-{args[0]}", TOOL_TIMEOUT_S)
        assert proc.popen.returncode == expect_rc, proc.describe()
        out = proc.stdout().strip()
        return json.loads(out.splitlines()[-1]) if out else None


@pytest.fixture
def tool(procs, control_tool) -> Tool:
    return Tool(procs, control_tool)


def worker_env(**extra: str) -> dict:
    env = venv_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SDK), env.get("PYTHONPATH")) if p)
    for var in ("ELASTICRUN_CONTROL_FILE", "LOCAL_RANK", "HYPERPOD_SIGNAL_COORDINATION"):
        if var not in extra:
            env.pop(var, None)
    return env


def spawn_python(procs, tmp_path: Path, name: str, source: str, env: dict):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    return procs.spawn([sys.executable, script], name, env=env)


def run_python(procs, tmp_path: Path, name: str, source: str, env: dict) -> list:
    """Runs a Python script to the end; returns the JSON lines it printed."""
    proc = spawn_python(procs, tmp_path, name, source, env)
    rc = proc.wait(WORKER_TIMEOUT_S)
    assert rc == 0, proc.describe()
    return [json.loads(line) for line in proc.stdout().splitlines() if line.startswith("{")]


def wait_until(predicate, what: str, proc=None, timeout: float = STARTUP_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.popen.poll() is not None:
            pytest.fail(f"{proc.name} exited while waiting for {what}\n{proc.describe()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}" + (f"\n{proc.describe()}" if proc else ""))
        time.sleep(0.02)


def test_a_python_worker_reads_the_event_the_agent_published(procs, tool, tmp_path):
    block = tmp_path / "control"
    assert tool("create", block, "4") == {"path": str(block), "num_slots": 4}
    reason = "node-7 drained: GPU Xid 79 — übergangsweise"  # UTF-8 through argv and the block
    assert tool(
        "publish", block, "--gen", "3", "--stop", "1200", "--kind", "scale_down",
        "--world", "12", "--deadline", "1700000000123", "--reason", reason,
    ) == {"event_seq": 1}

    [got] = run_python(procs, tmp_path, "reader", f"""
        import json
        from elasticrun import ControlBlock
        cb = ControlBlock({str(block)!r})
        e = cb.read_event()
        print(json.dumps(dict(e._asdict(), num_slots=cb.num_slots, pending=e.pending,
                              cached=cb.event() is cb.event())))
    """, worker_env())
    assert got == {
        "generation": 3, "event_seq": 1, "stop_step": 1200, "kind": 2, "next_world_size": 12,
        "deadline_unix_ms": 1700000000123, "reason": reason, "num_slots": 4, "pending": True,
        "cached": True,
    }
    # And the C++ reader agrees with itself.
    assert tool("read-event", block) == {
        "generation": 3, "event_seq": 1, "stop_step": 1200, "kind": "scale_down",
        "kind_value": 2, "next_world_size": 12, "deadline_unix_ms": 1700000000123,
        "reason": reason,
    }


def test_the_agent_reads_what_a_python_worker_wrote_into_its_slot(procs, tool, tmp_path):
    block = tmp_path / "control"
    tool("create", block, "4")
    before_ns = time.time_ns()
    lines = run_python(procs, tmp_path, "writer", f"""
        import json, os
        import elasticrun as er
        cb = er.ControlBlock({str(block)!r}, local_rank=2)
        cb.write_slot(2, 40, loss=0.5, tokens_per_s=1234.5, compute_us=2500)
        cb.write_slot(2, 41)  # keeps the last metrics
        cb.set_flags(2, er.FLAG_STOPPED)
        cb.set_section(2, "checkpoint", 600)  # cut to 8 bytes
        print(json.dumps({{"pid": os.getpid(), "own": cb.read_slot(2)._asdict()}}))
    """, worker_env())
    after_ns = time.time_ns()
    [report] = lines

    slot = tool("read-slot", block, "2")
    assert slot["step"] == 41
    assert slot["loss"] == 0.5
    assert slot["tokens_per_s"] == 1234.5
    assert slot["flags"] == 1 | 2 | 8  # ATTACHED (set at open) | STOPPED | IN_SECTION
    assert slot["compute_us"] == 2500
    assert slot["section"] == "checkpoi"
    assert slot["section_limit_s"] == 600
    assert slot["pid"] == report["pid"]
    assert before_ns <= slot["timestamp_ns"] <= after_ns  # CLOCK_REALTIME, written in between
    assert report["own"] == slot
    for other in ("0", "1", "3"):
        assert tool("read-slot", block, other) == {
            "step": -1, "timestamp_ns": 0, "loss": None, "tokens_per_s": None, "flags": 0,
            "pid": 0, "compute_us": 0, "section_limit_s": 0, "section": "",
        }
    assert tool("max-step", block) == {"max_step": 41}
    assert tool("attached", block, "2") == {"attached": True}
    assert tool("attached", block, "1") == {"attached": False}
    assert tool("attached", block) == {"attached": True}


def test_python_reads_slots_the_cxx_side_wrote_and_refuses_files_that_are_not_blocks(
    procs, tool, tmp_path
):
    block = tmp_path / "control"
    tool("create", block, "2")
    tool("write-slot", block, "1", "--step", "9", "--loss", "2.25", "--flags", "4", "--pid", "77",
         "--compute-us", "1500", "--section", "eval", "--section-limit", "30")
    short = tmp_path / "short"
    short.write_bytes(block.read_bytes()[:200])
    bad_magic = tmp_path / "bad_magic"
    bad_magic.write_bytes(b"XXXX" + block.read_bytes()[4:])
    too_few = tmp_path / "too_few"
    too_few.write_bytes(block.read_bytes()[:-1])

    [got] = run_python(procs, tmp_path, "reader", f"""
        import json, math
        from elasticrun import ControlBlock, ControlBlockError
        cb = ControlBlock({str(block)!r})
        s = cb.read_slot(1)
        errors = {{}}
        for name in ("short", "bad_magic", "too_few"):
            try:
                ControlBlock({str(tmp_path)!r} + "/" + name)
                errors[name] = None
            except ControlBlockError as e:
                errors[name] = str(e)
        print(json.dumps({{"step": s.step, "loss": s.loss, "tps_nan": math.isnan(s.tokens_per_s),
                          "flags": s.flags, "pid": s.pid, "max_step": cb.max_step(),
                          "compute_us": s.compute_us, "section": s.section,
                          "section_limit_s": s.section_limit_s, "errors": errors}}))
    """, worker_env())
    assert got["step"] == 9 and got["loss"] == 2.25 and got["tps_nan"]
    assert got["flags"] == 4 and got["pid"] == 77 and got["max_step"] == 9
    assert got["compute_us"] == 1500 and got["section"] == "eval" and got["section_limit_s"] == 30
    assert "shorter than the 256-byte header" in got["errors"]["short"]
    assert "bad magic" in got["errors"]["bad_magic"]
    assert "too short for 2 slots" in got["errors"]["too_few"]
    for message in got["errors"].values():
        assert str(tmp_path) in message


def test_ranks_stop_at_the_stop_step_the_agent_agreed_after_reading_their_progress(
    procs, tool, tmp_path
):
    block = tmp_path / "control"
    go = tmp_path / "go"
    tool("create", block, "2")
    worker = spawn_python(procs, tmp_path, "worker", f"""
        import json, os, time
        import elasticrun as er
        er.attach()
        for n in range(4):
            er.step(n, loss=1.0 / (n + 1))
            assert not er.elastic_event_detected()
        print("waiting at 3", flush=True)
        while not os.path.exists({str(go)!r}):
            assert not er.elastic_event_detected()  # pending, but no stop step yet
            time.sleep(0.01)
        n = 3
        while True:
            n += 1
            er.step(n)
            if er.elastic_event_detected():
                break
        er.stopped()
        er.saved()
        print(json.dumps(dict(er.info(), stopped_at=n,
                              earlier=er.elastic_event_detected(step=n - 1))))
    """, worker_env(ELASTICRUN_CONTROL_FILE=str(block), LOCAL_RANK="1"))

    wait_until(lambda: tool("max-step", block)["max_step"] == 3, "step 3 in the block", worker)
    wait_until(lambda: "waiting at 3" in worker.stdout(), "the worker to wait", worker)
    # The leader learns the highest step, publishes the event without a stop
    # step, then agrees on one a few steps ahead.
    tool("publish", block, "--gen", "5", "--kind", "scale_up", "--world", "16",
         "--reason", "node-9 joined")
    tool("set-stop", block, "6")
    go.touch()
    assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.describe()
    [report] = [json.loads(l) for l in worker.stdout().splitlines() if l.startswith("{")]
    assert report["stopped_at"] == 6
    assert report["earlier"] is False
    assert report["generation"] == 5
    assert report["event_kind"] == "scale_up"
    assert report["stop_step"] == 6
    assert report["next_world_size"] == 16
    assert report["reason"] == "node-9 joined"

    slot = tool("read-slot", block, "1")
    assert slot["step"] == 6
    assert slot["flags"] == 1 | 2 | 4  # ATTACHED | STOPPED | SAVED
    assert slot["loss"] == 0.25  # the last one reported (step 3)

    # The next round starts from a clean block.
    tool("reset", block, "6")
    assert tool("read-slot", block, "1")["flags"] == 0
    assert tool("max-step", block) == {"max_step": -1}
    event = tool("read-event", block)
    assert (event["generation"], event["kind"], event["stop_step"]) == (6, "none", -1)


def test_an_attached_worker_survives_sigusr1_and_reports_it(procs, tool, tmp_path):
    block = tmp_path / "control"
    tool("create", block, "1")
    worker = spawn_python(procs, tmp_path, "attached", """
        import json, signal, time
        import elasticrun as er
        earlier = []
        signal.signal(signal.SIGUSR1, lambda s, f: earlier.append(s))  # the script's own handler
        assert er.attach()
        deadline = time.monotonic() + 60
        while not er.signal_received() and time.monotonic() < deadline:
            time.sleep(0.01)
        print(json.dumps(dict(er.info(), chained=earlier)))
    """, worker_env(ELASTICRUN_CONTROL_FILE=str(block), LOCAL_RANK="0"))
    # The agent's rule: signal only a worker whose slot says ATTACHED.
    wait_until(lambda: tool("attached", block, "0")["attached"], "ATTACHED", worker)
    os.kill(worker.pid, signal.SIGUSR1)
    assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.describe()
    [report] = [json.loads(l) for l in worker.stdout().splitlines() if l.startswith("{")]
    assert report["signal_received"] is True
    assert report["attached"] is True
    assert report["chained"] == [signal.SIGUSR1]


def test_a_worker_that_did_not_attach_is_killed_by_sigusr1(procs, tool, tmp_path):
    # Why the agent must read ATTACHED before signalling: SIGUSR1's default
    # action terminates the process, which would turn a scale event into a
    # crash of every worker whose script does not use the SDK.
    block = tmp_path / "control"
    tool("create", block, "1")
    worker = spawn_python(procs, tmp_path, "plain", """
        import time
        print("ready", flush=True)
        time.sleep(120)
    """, worker_env(ELASTICRUN_CONTROL_FILE=str(block), LOCAL_RANK="0"))
    wait_until(lambda: "ready" in worker.stdout(), "the worker to start", worker)
    assert tool("attached", block, "0") == {"attached": False}
    assert tool("attached", block) == {"attached": False}
    os.kill(worker.pid, signal.SIGUSR1)
    assert worker.wait(WORKER_TIMEOUT_S) == -signal.SIGUSR1


def test_without_a_control_file_a_signal_is_no_event(procs, tmp_path):
    # Under torchrun: SIGUSR1 is caught (the worker lives) but, without
    # hyperpodrun's distributed coordination, never reported as an event.
    [got] = run_python(procs, tmp_path, "torchrun-worker", """
        import json, os, signal
        import elasticrun as er
        attached = er.attach()
        er.step(10)
        os.kill(os.getpid(), signal.SIGUSR1)
        print(json.dumps({"attached": attached, "signalled": er.signal_received(),
                          "detected": er.elastic_event_detected(),
                          "generation": er.info()["generation"]}))
    """, worker_env(LOCAL_RANK="0"))
    assert got == {"attached": False, "signalled": True, "detected": False, "generation": None}


def test_distributed_coordination_tells_every_rank_of_a_signal_one_rank_got(procs, tmp_path):
    go = tmp_path / "go"
    source = f"""
        import json, os, sys, time
        import torch.distributed as dist
        import elasticrun as er
        rank = int(os.environ["RANK"])
        er.attach()
        dist.init_process_group("gloo", init_method="file://{tmp_path}/rendezvous",
                                rank=rank, world_size=2)
        before = er.elastic_event_detected()  # a collective: both ranks call it
        open(f"{tmp_path}/ready{{rank}}", "w").close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (er.signal_received() if rank == 0 else os.path.exists({str(go)!r})):
                break
            time.sleep(0.01)
        after = er.elastic_event_detected()
        print(json.dumps({{"rank": rank, "before": before, "after": after,
                          "signalled": er.signal_received()}}))
        dist.destroy_process_group()
    """
    workers = [
        spawn_python(procs, tmp_path, f"rank{rank}", source, worker_env(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
            HYPERPOD_SIGNAL_COORDINATION="distributed"))
        for rank in range(2)
    ]
    for rank, w in enumerate(workers):
        wait_until(lambda: (tmp_path / f"ready{rank}").exists(), f"rank {rank} ready", w,
                   timeout=DIST_TIMEOUT_S)
    os.kill(workers[0].pid, signal.SIGUSR1)
    go.touch()
    reports = []
    for w in workers:
        assert w.wait(DIST_TIMEOUT_S) == 0, w.describe()
        reports += [json.loads(l) for l in w.stdout().splitlines() if l.startswith("{")]
    assert sorted(reports, key=lambda r: r["rank"]) == [
        {"rank": 0, "before": False, "after": True, "signalled": True},
        {"rank": 1, "before": False, "after": True, "signalled": False},
    ]
