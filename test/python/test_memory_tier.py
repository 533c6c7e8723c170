"""CheckpointManager over the memory tier (python/elasticrun/memory.py), with
real gloo ranks, each rank its own node (a tier directory of its own, as
ELASTICRUN_MEMORY_DIR names it under elasticrun; no agent here).
test/integration/test_memory_tier.py runs it under real agents."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from test_checkpoint import run_world

# argv: tiers, root ("-": none), mode, steps, save_every [sync|async]
#   train: trains `steps` steps, saving every save_every; prints its state.
#   load:  loads; prints what it got.
WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    tiers, root, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    steps, save_every, how = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.environ["ELASTICRUN_MEMORY_DIR"] = os.path.join(tiers, f"node{rank}")
    os.makedirs(os.environ["ELASTICRUN_MEMORY_DIR"], exist_ok=True)
    from elasticrun.checkpoint import CheckpointManager
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    ckpt = CheckpointManager(None if root == "-" else root)
    error, state = None, None
    try:
        state = ckpt.load(model, opt)
    except RuntimeError as e:
        error = str(e)
    step = state["step"] if state else 0
    try:
        while mode == "train" and step < steps:
            opt.zero_grad()
            model(torch.full((2, 4), float(rank + step + 1))).pow(2).sum().backward()
            opt.step()
            step += 1
            if step % save_every == 0:
                (ckpt.save if how == "sync" else ckpt.save_async)(step, model, opt,
                                                                  extra={"at": step})
        ckpt.wait()
    except RuntimeError as e:
        error = str(e)
    print(json.dumps({"rank": rank, "step": step, "state": state, "error": error,
                      "source": ckpt.loaded_from,
                      "weights": model.module.weight.detach().flatten().tolist()}), flush=True)
    dist.destroy_process_group()
    """
)


def run(tmp_path: Path, world: int, *args, **env) -> list[dict]:
    return run_world(tmp_path, world, tmp_path / "tiers", *args, worker=WORKER, **env)


def snapshots(tmp_path: Path, rank: int) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tiers" / f"node{rank}").iterdir())


@pytest.mark.parametrize("how", ["sync", "async"])
def test_without_a_directory_the_state_round_trips_through_each_nodes_memory(tmp_path, how):
    trained = run(tmp_path, 2, "-", "train", 6, 3, how)
    assert {r["error"] for r in trained} == {None}
    # One snapshot per node, the newest: the older one was removed.
    assert snapshots(tmp_path, 0) == ["step_000000006.r0"]
    assert snapshots(tmp_path, 1) == ["step_000000006.r1"]
    loaded = run(tmp_path, 2, "-", "load", 0, 1, how)
    for out in loaded:
        assert out["state"] == {"at": 6, "step": 6}
        assert out["source"] == "memory"
        assert out["weights"] == trained[0]["weights"]


def test_a_step_not_every_node_holds_is_not_loaded_and_the_directory_serves(tmp_path):
    root = tmp_path / "ckpt"
    # Disk every 2 steps, so steps 2 and 4 are on disk and in memory.
    run(tmp_path, 2, str(root), "train", 4, 2, "sync")
    assert (root / "latest").read_text().strip() == "step_000000004"
    # Node 1 lost its snapshot (a static job's node whose worker died
    # writing it): step 4 is not everywhere, so the directory's step 4 loads.
    for p in (tmp_path / "tiers" / "node1").iterdir():
        p.rename(p.with_name(p.name + ".partial"))  # half-written: never loaded
    loaded = run(tmp_path, 2, str(root), "load", 0, 1, "sync")
    assert [(out["state"]["step"], out["source"]) for out in loaded] == [(4, "directory")] * 2
    # Without the directory nothing common is left: an error that says so,
    # not a silent start from step 0.
    loaded = run(tmp_path, 2, "-", "load", 0, 1, "sync")
    assert [out["state"] for out in loaded] == [None, None]
    for out in loaded:
        assert "step 4 is not on every node" in out["error"], out
        assert "no checkpoint directory to fall back to" in out["error"], out


def test_a_state_over_the_memory_budget_is_an_error_at_the_first_save(tmp_path):
    out = run(tmp_path, 1, "-", "train", 2, 1, "sync", ELASTICRUN_MEMORY_LIMIT="100")
    assert out[0]["step"] == 1
    assert "holds at most 100 bytes (--memory-tier-limit)" in out[0]["error"]


def test_no_directory_and_no_memory_tier_is_an_error(monkeypatch, tmp_path):
    from elasticrun.checkpoint import CheckpointManager, memory_tier_available

    monkeypatch.delenv("ELASTICRUN_MEMORY_DIR", raising=False)
    assert not memory_tier_available()
    with pytest.raises(RuntimeError, match="no checkpoint directory and no memory tier"):
        CheckpointManager(None)
    monkeypatch.setenv("ELASTICRUN_MEMORY_DIR", str(tmp_path))
    assert memory_tier_available()
    assert CheckpointManager(None).memory.root == tmp_path


# argv: tiers, mode (save|load). FSDP2 over every rank; the layers have 7,
# 13 and 3 output rows, so no world here but 1 splits them evenly.
FSDP_WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    tiers, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.environ["ELASTICRUN_MEMORY_DIR"] = os.path.join(tiers, f"node{rank}")
    from elasticrun.checkpoint import CheckpointManager
    # Another seed at the load: nothing but the snapshot reaches that model.
    torch.manual_seed(0 if mode == "save" else 1)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 13),
                                torch.nn.Tanh(), torch.nn.Linear(13, 3))
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    ckpt = CheckpointManager(None)
    state, error = None, None
    if mode == "save":
        for step in range(1, 4):
            opt.zero_grad()
            g = torch.Generator().manual_seed(100 * step + rank)
            model(torch.randn(4, 5, generator=g)).pow(2).sum().backward()
            opt.step()
        ckpt.save(3, model, opt, extra={"at": 3})
    else:
        try:
            state = ckpt.load(model, opt)
        except RuntimeError as e:
            error = str(e)
    params = {n: p.full_tensor().flatten().tolist() for n, p in model.named_parameters()}
    moments = [opt.state[p]["exp_avg_sq"].full_tensor().flatten().tolist()
               if p in opt.state else None for p in model.parameters()]
    print(json.dumps({"rank": rank, "state": state, "params": params, "moments": moments,
                      "error": error}), flush=True)
    dist.destroy_process_group()
    """
)


def test_a_sharded_state_saved_at_four_ranks_restores_from_memory_at_three_bit_for_bit(tmp_path):
    saved = run_world(tmp_path, 4, tmp_path / "tiers", "save", worker=FSDP_WORKER)
    names = {r: snapshots(tmp_path, r) for r in range(4)}
    assert names == {r: [f"step_000000003.r{r}of4"] for r in range(4)}, names
    # What the agents of three nodes would hold after their fetches: every
    # rank's shards of step 3.
    for node in range(3):
        target = tmp_path / "tiers3" / f"node{node}"
        for r in range(4):
            shutil.copytree(tmp_path / "tiers" / f"node{r}" / names[r][0], target / names[r][0])
    loaded = run_world(tmp_path, 3, tmp_path / "tiers3", "load", worker=FSDP_WORKER)
    for out in loaded:
        assert out["state"] == {"at": 3, "step": 3}
        assert out["params"] == saved[0]["params"]
        assert out["moments"] == saved[0]["moments"]
    # Rank 1's shards on no node (the node that held them is gone): an
    # error that names them.
    for node in range(3):
        shutil.rmtree(tmp_path / "tiers3" / f"node{node}" / names[1][0])
    loaded = run_world(tmp_path, 3, tmp_path / "tiers3", "load", worker=FSDP_WORKER)
    for out in loaded:
        assert "the shards of rank(s) 1 of the 4 that saved step 3 are on no node" in out["error"]


def test_under_replication_a_ranks_older_shards_are_left_for_the_agent_to_prune(
        tmp_path, monkeypatch):
    """The agent replicates sharded state to peers (ELASTICRUN_MEMORY_REPLICAS)
    and removes a rank's older shards only once the newer step is
    replicated: a node lost before then needs the older step of every rank,
    so the SDK's prune leaves them."""
    from elasticrun.memory import MemoryTier, snapshot_name

    def tier_with_two_steps(name: str) -> MemoryTier:
        root = tmp_path / name
        for step in (4, 8):
            snap = root / snapshot_name(step, 0, 2)
            snap.mkdir(parents=True)
            (snap / ".metadata").write_bytes(b"m")
        monkeypatch.setenv("ELASTICRUN_MEMORY_DIR", str(root))
        return MemoryTier.from_env()

    monkeypatch.setenv("ELASTICRUN_MEMORY_REPLICAS", "1")
    replicated = tier_with_two_steps("replicated")
    replicated.prune(8, 0, 2)
    assert [p.name for p in replicated.snapshots()] == [snapshot_name(4, 0, 2),
                                                       snapshot_name(8, 0, 2)]
    monkeypatch.delenv("ELASTICRUN_MEMORY_REPLICAS")
    alone = tier_with_two_steps("alone")
    alone.prune(8, 0, 2)
    assert [p.name for p in alone.snapshots()] == [snapshot_name(8, 0, 2)]
