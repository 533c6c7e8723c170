"""elasticrun.checkpoint with real gloo process groups: a checkpoint written
at one world size loads at another, and a crash mid-save leaves the previous
checkpoint published."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from elasticrun.checkpoint import CheckpointManager

    root, mode = sys.argv[1], sys.argv[2]
    steps = [int(s) for s in sys.argv[3].split(",")]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ckpt = CheckpointManager(root, keep=2)
    done = 0
    for step in steps if mode == "save" else []:
        while done < step:
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            sched.step()
            done += 1
        ckpt.save(step, model, opt, sched, extra={"position": 1000 + step})
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


def run_world(tmp_path: Path, world: int, *args: str) -> list[dict]:
    import json

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
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
