"""elasticrun.checkpoint with real gloo process groups: a checkpoint written
at one world size loads at another, and a crash mid-save leaves the previous
checkpoint published."""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path

import pytest

import warm_ranks

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from elasticrun.checkpoint import CheckpointManager
    import elasticrun.checkpoint as checkpoint_module

    # CRASH=<point>:<rank>:<step>: that rank SIGKILLs itself at that point
    # of the save of that step.
    def inject_faults(rank):
        if not os.environ.get("CRASH"):
            return
        import signal
        import torch.distributed.checkpoint
        point, crash_rank, crash_step = os.environ["CRASH"].split(":")
        if rank != int(crash_rank):
            return
        die = lambda: os.kill(os.getpid(), signal.SIGKILL)
        real_save, real_publish, real_replace = (torch.distributed.checkpoint.save,
                                                 checkpoint_module._write_atomically, os.replace)
        def save(state, checkpoint_id, **kw):
            out = real_save(state, checkpoint_id=checkpoint_id, **kw)
            if point == "shard_written" and state["step"] == int(crash_step):
                die()
            return out
        def publish(path, text):
            if point == "before_latest" and text.strip().endswith(f"{int(crash_step):09d}"):
                die()
            return real_publish(path, text)
        def replace(src, dst):
            if point == "latest_half_written" and os.path.basename(dst) == "latest":
                if open(src).read().strip().endswith(f"{int(crash_step):09d}"):
                    die()
            return real_replace(src, dst)
        torch.distributed.checkpoint.save = save
        checkpoint_module._write_atomically = publish
        os.replace = replace

    # argv: root, "save" or "load", the steps to save at ("3a": with
    # save_async); TRAIN_ON=n: n more steps after the last save, before
    # waiting for the one in flight.
    root, mode = sys.argv[1], sys.argv[2]
    saves = sys.argv[3].split(",") if mode == "save" else []
    dist.init_process_group("gloo")
    inject_faults(dist.get_rank())
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ckpt = CheckpointManager(root, keep=2)
    done = 0
    def train_step():
        global done
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        sched.step()
        done += 1
    for item in saves:
        step = int(item.removesuffix("a"))
        while done < step:
            train_step()
        save = ckpt.save_async if item.endswith("a") else ckpt.save
        save(step, model, opt, sched, extra={"position": 1000 + step})
    for _ in range(int(os.environ.get("TRAIN_ON", "0"))):
        train_step()
    ckpt.wait()
    state = ckpt.load(model, opt, sched) if mode == "load" else None
    weights = model.module.weight.detach().flatten().tolist()
    out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "weights": weights,
           "lr": sched.get_last_lr()[0], "state": state,
           "opt_steps": [int(s["step"]) for s in opt.state_dict()["state"].values()]}
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_world(tmp_path: Path, world: int, *args, worker: str = WORKER, **extra_env: str):
    """Starts `world` ranks of the script `worker` (text) on a gloo group."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1",
                   **extra_env)
        procs.append(warm_ranks.start(script, args, env))
    return procs


def run_world(tmp_path: Path, world: int, *args: str, worker: str = WORKER,
              **extra_env: str) -> list[dict]:
    """Runs `world` ranks of `worker` to their end; each one's last JSON line."""
    import json

    procs = start_world(tmp_path, world, *args, worker=worker, **extra_env)
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def test_a_checkpoint_saved_by_two_ranks_loads_into_three_with_optimizer_and_scheduler(tmp_path):
    root = tmp_path / "ckpt"
    saved = run_world(tmp_path, 2, str(root), "save", "3")
    assert (root / "latest").read_text().strip() == "step_000000003"
    loaded = run_world(tmp_path, 3, str(root), "load", "0")
    for out in loaded:
        assert out["weights"] == saved[0]["weights"]
        assert out["lr"] == saved[0]["lr"] == pytest.approx(0.1 * 0.5**3)
        assert out["state"] == {"position": 1003, "step": 3}
        assert out["opt_steps"] == [3, 3]


def test_only_the_newest_checkpoints_are_kept_and_a_partial_save_is_never_loaded(tmp_path):
    root = tmp_path / "ckpt"
    run_world(tmp_path, 2, str(root), "save", "1,2,3")
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step_000000002",
                                                                     "step_000000003"]
    # A save that crashed half-way: its directory exists, `latest` does not name it.
    (root / "step_000000004.partial").mkdir()
    (root / "step_000000004.partial" / "__0_0.distcp").write_bytes(b"torn")
    loaded = run_world(tmp_path, 2, str(root), "load", "0")
    assert all(out["state"]["step"] == 3 for out in loaded)


def test_an_async_save_writes_the_state_of_its_step_while_training_goes_on(
        tmp_path, after_two_steps):
    root = tmp_path / "ckpt"
    # Three more steps change every weight and optimizer moment while the
    # save of step 2 is written from its copy.
    saved = run_world(tmp_path, 2, str(root), "save", "1a,2a", TRAIN_ON="3")
    assert saved[0]["opt_steps"] == [5, 5]
    assert (root / "latest").read_text().strip() == "step_000000002"
    loaded = run_world(tmp_path, 3, str(root), "load", "0")
    for out in loaded:
        assert out["state"] == {"position": 1002, "step": 2}
        assert out["weights"] == after_two_steps[0]["weights"]
        assert out["lr"] == after_two_steps[0]["lr"]
        assert out["opt_steps"] == [2, 2]


def test_async_and_blocking_saves_take_turns_and_a_crashed_save_of_the_same_step_is_written_over(
        tmp_path):
    root = tmp_path / "ckpt"
    run_world(tmp_path, 2, str(root), "save", "1")
    # What a save of step 2 killed half-way left: a torn shard, no metadata.
    (root / "step_000000002.partial").mkdir()
    (root / "step_000000002.partial" / "__1_0.distcp").write_bytes(b"torn")
    (root / "step_000000002.partial" / "__7_0.distcp").write_bytes(b"from a larger world")
    saved = run_world(tmp_path, 2, str(root), "save", "2a,3a,4")
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000000003",
                                                      "step_000000004"]
    loaded = run_world(tmp_path, 2, str(root), "load", "0")
    for out in loaded:
        assert out["state"] == {"position": 1004, "step": 4}
        assert out["weights"] == saved[0]["weights"]


@pytest.fixture(scope="module")
def after_two_steps(tmp_path_factory) -> list[dict]:
    """What two ranks hold after two steps, saved without a fault."""
    d = tmp_path_factory.mktemp("reference")
    return run_world(d, 2, str(d / "ckpt"), "save", "1,2")


@pytest.mark.parametrize("crash,saves", [
    ("shard_written:1", "1,2,3"), ("before_latest:0", "1,2,3"), ("latest_half_written:0", "1,2,3"),
    # Rank 0 publishes an async save from its background thread.
    ("latest_half_written:0", "1a,2a,3a")])
def test_a_rank_killed_mid_save_leaves_the_previous_checkpoint_loadable_at_another_size(
        tmp_path, crash, saves, after_two_steps):
    import signal

    root = tmp_path / "ckpt"
    procs = start_world(tmp_path, 2, str(root), "save", saves, CRASH=f"{crash}:3")
    crashed = int(crash.split(":")[1])
    assert procs[crashed].wait(timeout=240) == -signal.SIGKILL
    # Its peer waits for it in a collective, or has finished: it goes too.
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=60)
    assert (root / "latest").read_text().strip() == "step_000000002"
    loaded = run_world(tmp_path, 3, str(root), "load", "0")
    for out in loaded:
        assert out["state"] == {"position": 1002, "step": 2}
        assert out["weights"] == after_two_steps[0]["weights"]
        assert out["opt_steps"] == [2, 2]
