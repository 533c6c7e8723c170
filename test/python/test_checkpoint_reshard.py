"""Resharding through elasticrun.checkpoint is exact: a model sharded with
FSDP2 (fully_shard, gloo, CPU) saved at 4 ranks loads at 1, 2, 3 and 5
ranks with every parameter, every optimizer state tensor (step included),
the learning rates and the scheduler equal to the original bit for bit;
saved again at that size, it loads back at 4 ranks bit for bit too.

The layers have 7, 13 and 3 output rows: no size here but 1 splits the
first two evenly, and at 4 and 5 ranks some ranks hold none of the last
layer's rows. DCP must cut and stitch uneven chunks, not copy whole shards.

Five processes run every world in turn, one process group at a time on one
TCPStore (a fresh process per world would start torch 31 times, the bulk
of the runtime on a small machine). Each world builds its model and
optimizer anew from another seed, so nothing reaches it but the
checkpoint. Rank 0 of each world writes the whole tensors it gathered to a
file; the comparison is here, on the raw bytes.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

import warm_ranks
from test_checkpoint import REPO, free_port

SAVED_AT = 4
RESHARDED_AT = (1, 2, 3, 5)
POOL = max(SAVED_AT, *RESHARDED_AT)
TIMEOUT_S = 600

WORKER = textwrap.dedent(
    """
    import datetime, sys
    from pathlib import Path
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Shard
    from elasticrun.checkpoint import CheckpointManager

    out = Path(sys.argv[1])
    saved_at, trained_steps = int(sys.argv[2]), 3
    resharded_at = [int(m) for m in sys.argv[3].split(",")]
    rank = int(sys.argv[4])
    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", int(sys.argv[5]), is_master=rank == 0, timeout=timeout)

    def world(name, size):
        dist.init_process_group("gloo", store=dist.PrefixStore(name + "/", store), rank=rank,
                                world_size=size, timeout=timeout)

    def leave():
        dist.barrier()
        dist.destroy_process_group()

    def build(seed, size):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                    torch.nn.Linear(7, 13), torch.nn.Tanh(),
                                    torch.nn.Linear(13, 3))
        mesh = init_device_mesh("cpu", (size,))
        for layer in model[::2]:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        # amsgrad: a third state tensor per parameter.
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1, amsgrad=True)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return model, opt, sched

    def whole(t):
        return t.full_tensor() if isinstance(t, DTensor) else t.detach().clone()

    def gather(model, opt, sched, resumed=None):
        \"\"\"Everything the checkpoint holds, as whole tensors; rank 0 keeps it.\"\"\"
        state = {"resumed": resumed, "scheduler": sched.state_dict(),
                 "param_groups": [{k: v for k, v in g.items() if k != "params"}
                                  for g in opt.param_groups]}
        rows = {}
        for name, p in model.named_parameters():
            # Really sharded: each rank holds a slice of dim 0, not a replica.
            assert isinstance(p, DTensor) and p.placements == (Shard(0),), (name, p)
            rows[name] = p.to_local().shape[0]
            state["param/" + name] = whole(p.detach())
            for key, value in opt.state[p].items():
                state[f"optim/{name}/{key}"] = whole(value)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, rows)
        state["local_rows"] = everyone
        return state

    def keep(state, name):
        if rank == 0:
            torch.save(state, out / (name + ".pt"))

    def params(model):
        return {"param/" + n: whole(p.detach()) for n, p in model.named_parameters()}

    def train():
        model, opt, sched = build(0, saved_at)
        for _ in range(trained_steps):
            # Each rank its own batch: the gradients are reduce-scattered.
            torch.manual_seed(100 + rank)
            opt.zero_grad()
            model(torch.randn(6, 5)).square().sum().backward()
            opt.step()
            sched.step()
        keep(gather(model, opt, sched, {"step": trained_steps, "position": 4096}), "original")
        CheckpointManager(out / f"at{saved_at}").save(trained_steps, model, opt, sched,
                                                      extra={"position": 4096})

    def load(size, src, name, seed):
        model, opt, sched = build(seed, size)
        keep(params(model), name + "_fresh")
        resumed = CheckpointManager(src).load(model, opt, sched)
        keep(gather(model, opt, sched, resumed), name)
        return model, opt, sched, resumed

    if rank < saved_at:
        world("train", saved_at)
        train()
        leave()
    for m in resharded_at:
        if rank < m:
            world(f"at{m}", m)
            model, opt, sched, resumed = load(m, out / f"at{saved_at}", f"loaded_at{m}",
                                               seed=10 + m)
            step = resumed.pop("step")
            CheckpointManager(out / f"at{m}").save(step, model, opt, sched, extra=resumed)
            leave()
    if rank < saved_at:
        world("back", saved_at)
        for m in resharded_at:
            load(saved_at, out / f"at{m}", f"back_from{m}", seed=20 + m)
        leave()
    """
)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> Path:
    """Runs the worlds; returns the directory of what each gathered."""
    out = tmp_path_factory.mktemp("reshard")
    script = out / "worker.py"
    script.write_text(WORKER)
    port = str(free_port())
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1")
    logs = [out / f"rank{rank}.log" for rank in range(POOL)]
    procs = []
    for rank, log in enumerate(logs):
        procs.append(warm_ranks.start(
            script, [out, SAVED_AT, ",".join(map(str, RESHARDED_AT)), rank, port], env,
            merge_into=log))
    # A rank that fails leaves its peers waiting in a collective: stop them
    # at once and report the rank that failed, not their timeouts.
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            if all(c == 0 for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    assert not failed, "\n".join(
        f"rank {r}: rc {procs[r].returncode}\n{logs[r].read_text()[-3000:]}" for r in failed)
    return out


def bits(value):
    """value with each tensor as its dtype, shape and bytes and each float
    as its hex spelling: two of these are equal only if bit for bit equal."""
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().contiguous()
        return str(t.dtype), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, dict):
        return {k: bits(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [bits(v) for v in value]
    return value


def gathered(out: Path, name: str) -> dict:
    import torch

    return torch.load(out / f"{name}.pt", weights_only=True)


def difference(got, want) -> str:
    """Where two tensors of the same shape first differ, for the message."""
    import torch

    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return f"{got!r} != {want!r}"
    unequal = (got != want) | (torch.signbit(got) != torch.signbit(want))
    at = tuple(unequal.nonzero()[0].tolist())
    return (f"{int(unequal.sum())} of {got.numel()} elements differ, first at {at}: "
            f"{got[at].item()!r} != {want[at].item()!r}")


def assert_bit_equal(got: dict, want: dict) -> None:
    keys = set(want) - {"local_rows"}
    assert set(got) - {"local_rows"} == keys
    for key in sorted(keys):
        assert bits(got[key]) == bits(want[key]), f"{key}: {difference(got[key], want[key])}"


def test_the_saved_state_is_split_unevenly_over_four_ranks_with_adam_state_after_three_steps(
        worlds):
    original = gathered(worlds, "original")
    # torch.chunk's split, as FSDP2 cuts dim 0: the last rank holds no row of 3.
    assert original["local_rows"] == [{"0.weight": 2, "0.bias": 2, "2.weight": 4, "2.bias": 4,
                                       "4.weight": 1, "4.bias": 1}] * 3 + [
        {"0.weight": 1, "0.bias": 1, "2.weight": 1, "2.bias": 1, "4.weight": 0, "4.bias": 0}]
    steps = [original[k] for k in original if k.endswith("/step")]
    assert len(steps) == 6 and all(s.item() == 3 for s in steps)
    assert len([k for k in original if k.startswith("optim/")]) == 6 * 4


@pytest.mark.parametrize("m", RESHARDED_AT)
def test_state_saved_at_four_ranks_loads_bit_for_bit_at_another_size(worlds, m):
    original = gathered(worlds, "original")
    loaded = gathered(worlds, f"loaded_at{m}")
    assert len(loaded["local_rows"]) == m
    # What the load replaced differed: a load that did nothing would fail.
    fresh = gathered(worlds, f"loaded_at{m}_fresh")
    for key, value in fresh.items():
        assert bits(value) != bits(original[key]), key
    assert_bit_equal(loaded, original)


@pytest.mark.parametrize("m", RESHARDED_AT)
def test_state_resharded_to_another_size_and_saved_there_loads_back_at_four_bit_for_bit(
        worlds, m):
    original = gathered(worlds, "original")
    back = gathered(worlds, f"back_from{m}")
    assert back["local_rows"] == original["local_rows"]
    assert_bit_equal(back, original)
