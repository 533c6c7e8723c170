"""CheckpointManager.rescue() with real gloo process groups: when a rank dies,
a surviving rank writes the replicated (DDP) state of the last step it
completed, and the next load() resumes there, at any world size, instead
of at the last periodic checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

import warm_ranks
from test_checkpoint import free_port
from test_checkpoint import start_world as checkpoint_world

REPO = Path(__file__).resolve().parents[2]

# argv: root, mode, steps, save_every, [die_rank die_after]
#   train: trains `steps` steps with a periodic checkpoint every save_every;
#          rank die_rank SIGKILLs itself before step die_after + 1 (after
#          the checkpoint of step die_after, if there is one);
#          the survivors rescue from the error their collective raises.
#   load:  loads and prints what it got.
# Each process prints one JSON line: its rank, weights, optimizer state,
# learning rate, what load() returned and what rescue() returned.
WORKER = textwrap.dedent(
    """
    import json, os, signal, sys
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from elasticrun.checkpoint import CheckpointManager

    root, mode, steps, save_every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    die_rank, die_after = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (-1, -1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ckpt = CheckpointManager(root, keep=2)
    state = ckpt.load(model, opt, sched)
    step = state["step"] if state else 0
    rescued = None

    def report(**more):
        print(json.dumps({"rank": rank, "step": step, "state": state, "rescued": rescued,
                          "weights": model.module.weight.detach().flatten().tolist(),
                          "bias": model.module.bias.detach().flatten().tolist(),
                          "lr": sched.get_last_lr()[0],
                          "adam": [s["exp_avg"].flatten().tolist()
                                   for s in opt.state_dict()["state"].values()], **more}),
              flush=True)

    try:
        while mode == "train" and step < steps:
            if rank == die_rank and step == die_after:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            # Each rank its own data, so that the all-reduce matters.
            x = torch.full((2, 4), float(rank + step + 1))
            model(x).pow(2).sum().backward()
            opt.step()
            sched.step()
            step += 1
            if step % save_every == 0:
                ckpt.save(step, model, opt, sched, extra={"position": 1000 + step})
            if mode == "train" and os.environ.get("REPORT_EVERY_STEP"):
                report()
    except Exception as e:
        path = ckpt.rescue(step, model, opt, sched, extra={"position": 1000 + step})
        rescued = str(path) if path else None
        report(error=type(e).__name__)
        sys.exit(3)
    report()
    dist.destroy_process_group()
    """
)


def start_world(tmp_path: Path, world: int, *args, **extra_env: str):
    return checkpoint_world(tmp_path, world, *args, worker=WORKER, **extra_env)


def finish(procs) -> list[tuple[int, dict | None, str]]:
    """(return code, the JSON line or None, stderr) of each process, in rank order."""
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=240)
        finally:
            if p.poll() is None:
                p.kill()
        lines = stdout.strip().splitlines()
        out.append((p.returncode, json.loads(lines[-1]) if lines else None, stderr))
    return out


def run_ok(tmp_path: Path, world: int, *args) -> list[dict]:
    results = finish(start_world(tmp_path, world, *args))
    for code, _, err in results:
        assert code == 0, err
    return [r for _, r, _ in results]


def rescue_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("rescue_"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, dict]:
    """What rank 0 of three holds after each of 9 steps, without a fault."""
    d = tmp_path_factory.mktemp("reference")
    procs = start_world(d, 3, d / "ckpt", "train", 9, 100, REPORT_EVERY_STEP="1")
    out, err = procs[0].communicate(timeout=240)
    for p in procs:
        p.communicate(timeout=240)
        assert p.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    return {r["step"]: r for r in lines[:-1]}  # the last line repeats step 9


def test_a_survivor_rescues_the_last_step_and_the_job_resumes_there_at_any_size(
        tmp_path, reference):
    root = tmp_path / "ckpt"
    # Rank 2 dies after step 7; the last periodic checkpoint is step 5.
    results = finish(start_world(tmp_path, 3, root, "train", 9, 5, 2, 7))
    assert results[2][0] == -signal.SIGKILL
    survivors = [r for code, r, _ in results[:2]]
    assert [code for code, _, _ in results[:2]] == [3, 3], [err for _, _, err in results]
    # Each survivor completed step 7 and failed in step 8: they claim step 7
    # in the store, and exactly one writes it.
    assert [r["step"] for r in survivors] == [7, 7]
    assert sum(r["rescued"] is not None for r in survivors) == 1
    assert (root / "latest").read_text().strip() == "step_000000005"
    assert len(rescue_dirs(root)) == 1 and rescue_dirs(root)[0].startswith("rescue_000000007.r")

    loaded = run_ok(tmp_path, 2, root, "load", 0, 100)
    for out in loaded:
        assert out["state"] == {"position": 1007, "step": 7}
        for key in ("weights", "bias", "lr", "adam"):
            assert out[key] == reference[7][key], key
    # The rescue is now a published checkpoint, and nothing else of it is left.
    assert (root / "latest").read_text().strip() == "step_000000007"
    assert rescue_dirs(root) == []
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step_000000005",
                                                                     "step_000000007"]
    # Back at three ranks, the job trains on to the state of the run that
    # never failed.
    resumed = run_ok(tmp_path, 3, root, "train", 9, 100)
    for out in resumed:
        assert out["state"]["step"] == 7
        for key in ("weights", "bias", "lr", "adam"):
            assert out[key] == reference[9][key], key


def test_when_the_store_died_with_its_rank_every_survivor_writes_its_own_rescue(tmp_path,
                                                                                 reference):
    root = tmp_path / "ckpt"
    # Rank 0 hosts the store (MASTER_ADDR): the claims cannot be answered.
    results = finish(start_world(tmp_path, 3, root, "train", 9, 5, 0, 7))
    assert results[0][0] == -signal.SIGKILL
    assert [r["rescued"] is not None for _, r, _ in results[1:]] == [True, True]
    assert rescue_dirs(root) == ["rescue_000000007.r1", "rescue_000000007.r2"]
    assert "did not answer the claim" in results[1][2]
    loaded = run_ok(tmp_path, 2, root, "load", 0, 100)
    for out in loaded:
        assert out["state"]["step"] == 7
        assert out["weights"] == reference[7]["weights"]
    assert rescue_dirs(root) == []


def test_no_rescue_when_the_latest_checkpoint_already_holds_the_step(tmp_path):
    root = tmp_path / "ckpt"
    # Rank 2 dies right after the periodic checkpoint of step 6.
    results = finish(start_world(tmp_path, 3, root, "train", 9, 3, 2, 6))
    assert [(r["step"], r["rescued"]) for _, r, _ in results[:2]] == [(6, None), (6, None)]
    assert rescue_dirs(root) == []


SINGLE = textwrap.dedent(
    """
    import json, os, signal, sys
    import torch, torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from elasticrun.checkpoint import CheckpointManager

    root, case = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 3)
    ckpt = CheckpointManager(root)
    if case == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        print(json.dumps({"rescued": str(ckpt.rescue(4, model))}), flush=True)
    elif case == "sigterm":
        # SIGTERM arrives while the rescue is being written: it waits.
        real = dcp.save
        def save(*a, **k):
            os.kill(os.getpid(), signal.SIGTERM)
            return real(*a, **k)
        dcp.save = save
        ckpt.rescue(4, model)
        print("after the rescue", flush=True)
    elif case == "load":
        state = ckpt.load(model)
        print(json.dumps({"state": state}), flush=True)
    """
)


def run_single(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "single.py"
    script.write_text(SINGLE)
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1")
    return warm_ranks.run(script, args, env, timeout=240)


def test_sharded_state_is_not_rescued(tmp_path):
    root = tmp_path / "ckpt"
    r = run_single(tmp_path, str(root), "fsdp")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"rescued": "None"}
    assert "the state is sharded" in r.stderr
    assert not root.exists() or rescue_dirs(root) == []


def test_sigterm_waits_for_a_rescue_and_a_half_written_one_is_never_loaded(tmp_path):
    root = tmp_path / "ckpt"
    r = run_single(tmp_path, str(root), "sigterm")
    # The signal took its course once the rescue returned, before the print.
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert "after the rescue" not in r.stdout
    assert rescue_dirs(root) == ["rescue_000000004.r0"]
    assert (root / "rescue_000000004.r0" / ".metadata").is_file()
    # A later rescue cut short: its directory never got its final name, or
    # (hand-made) got it without DCP's metadata.
    (root / "rescue_000000009.r1.partial").mkdir()
    (root / "rescue_000000008.r1").mkdir()
    r = run_single(tmp_path, str(root), "load")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"state": {"step": 4}}
    assert (root / "latest").read_text().strip() == "step_000000004"
    assert rescue_dirs(root) == ["rescue_000000008.r1"]  # no metadata: not ours to remove
