"""examples/python/train_fsdp.py (FSDP2 over gloo) under real elasticrun
agents through 2 -> 4 -> 3 nodes, its micro-batches from a job config that
`elasticctl plan --emit-config` wrote for its model.

Agents run on 127.0.0.x addresses of this machine, one worker each, around
`elasticctl store` (elastic_job.Job). The planner is given a few MiB of
"GPU memory", so that at this model's size the largest micro-batch that
fits is small and differs by size: the plans it leads to are uneven at 2
and 3 nodes and a single step at 4. The tests wait for the step log to
show each world size before they cause the next event; --step-s only paces
the steps so that the events land while the job trains. Timeouts bound
hangs only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import step_log
from conftest import REPO, elasticctl  # noqa: F401 (fixture)
from elastic_job import PYTHON_SDK, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    launcher_env,
    marker,  # noqa: F401 (fixture)
    torchrun,  # noqa: F401 (fixture)
    wait_marked_gone,
)
from test_train_elastic_python import check_run, finish, generations, two_four_three

sys.path.insert(0, str(PYTHON_SDK))
from elasticrun.batch import load_overrides, micro_batch_sizes, plan_batches  # noqa: E402

TRAIN = REPO / "examples" / "python" / "train_fsdp.py"
GLOBAL_BATCH = 20
DATASET = 120  # 6 steps an epoch: the resizes fall in different epochs
# The job must still train when the last event comes: about 40 steps pass
# before it runs at 3 (most at 2, while the joiners' warm interpreters
# import torch, 6 to 9 s on 2 busy cores), so twice that.
STEPS = 80
# The model's shape, for the example and for the planner alike.
SHAPE = {"--layers": "2", "--hidden": "64", "--heads": "4", "--ffn-hidden": "128",
         "--vocab": "64", "--seq-len": "32"}
# 3 MiB, 2.8 after the margin: at most 4, 5 and 5 sequences fit at 2, 3 and 4
# ranks, which the SDK splits as [3, 2] in 4 accumulation steps, [4, 3, 3] in 2
# and [5, 5, 5, 5] in 1.
GPU_MEMORY_GIB = "0.003"
STEP_S = "0.2"
RUN_ID = "train-fsdp"


def emit_config(elasticctl: Path, path: Path, nodes: str = "2:4",  # noqa: F811
                gpus_per_node: int = 1) -> dict:
    """The planner's worldSizeOverrides for `nodes` nodes, as the Python SDK
    reads them."""
    out = subprocess.run([elasticctl, "plan", *(a for kv in SHAPE.items() for a in kv),
                          "--precision", "fp32", "--sharding", "fsdp",
                          "--gpu-memory", GPU_MEMORY_GIB, "--global-batch", str(GLOBAL_BATCH),
                          "--world-sizes", nodes, "--gpus-per-node", str(gpus_per_node),
                          "--emit-config", path],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return load_overrides(path)


def check_steps(logged: dict[int, list[dict]], overrides: dict) -> None:
    """The run's steps, samples and epochs as test_train_elastic_python's
    check_run has them; and every rank's micro-batch and the accumulation
    steps are the plan of the config's range at that size."""
    check_run(logged, STEPS, DATASET, GLOBAL_BATCH)
    for step, ranks in sorted(logged.items()):
        world = ranks[0]["world"]
        # One worker a node: the world size is the node count the config is keyed by.
        top = overrides[world]["maxMicroBatchSize"]
        plan = plan_batches(GLOBAL_BATCH, world, micro_batch_sizes(overrides[world], [1]))
        assert [e["micro"] for e in ranks] == list(plan.micro_batches), (step, ranks)
        assert {e["accum"] for e in ranks} == {plan.accum_steps}, (step, ranks)
        assert all(1 <= e["micro"] <= top for e in ranks), (step, ranks)
        assert [len(e["indices"]) for e in ranks] == list(plan.local_batches), (step, ranks)


def check_resumed(log: Path, gens: list[tuple[int, int, int]]) -> None:
    """Each generation but the first loaded, at another world size, the
    whole state (every parameter and optimizer tensor, gathered) that the
    one before saved at its last step, bit for bit; the first started from
    nothing, and the last saved at the end."""
    states = step_log.states(log)
    for (gen, world, last), (nxt, nxt_world, _) in zip(gens, gens[1:]):
        saved = [s for s in states if s["gen"] == gen and s["what"] == "saved"]
        loaded = [s for s in states if s["gen"] == nxt and s["what"] == "loaded"]
        assert [(s["step"], s["world"]) for s in saved] == [(last, world)], (gen, saved)
        assert [(s["step"], s["world"]) for s in loaded] == [(last, nxt_world)], (nxt, loaded)
        assert loaded[0]["digest"] == saved[0]["digest"], (gen, nxt)
    first = [s for s in states if s["gen"] == gens[0][0] and s["what"] == "loaded"]
    assert [s["step"] for s in first] == [0], first
    final = [s for s in states if s["gen"] == gens[-1][0] and s["what"] == "saved"]
    assert [s["step"] for s in final] == [STEPS], final
    # Training changed the state between the saves: equal digests mean something.
    assert len({s["digest"] for s in states}) == len(gens) + 1, states


def test_resized_from_two_to_four_to_three_nodes_it_resumes_resharded_and_trains_as_planned(
        procs, marker, elasticrun, elasticctl, tmp_path, store):  # noqa: F811
    config = tmp_path / "job.yaml"
    overrides = emit_config(elasticctl, config)
    assert sorted(overrides) == [2, 3, 4], config.read_text()
    plans = {n: plan_batches(GLOBAL_BATCH, n, micro_batch_sizes(overrides[n], [1]))
             for n in overrides}
    # What the planner's ranges lead to is not the even split a single
    # micro-batch would force, and differs at each size.
    assert len({p.micro_batches[-1] for p in plans.values()}) == 3, plans
    assert any(len(set(p.micro_batches)) > 1 for p in plans.values()), plans

    log = tmp_path / "log"
    job = Job(procs, marker, elasticrun, tmp_path, "2:4", f"127.0.0.1:{store}", run_id=RUN_ID,
              worker=TRAIN,
              # Both joiners wait out a scaling timeout of 3 s, so the job grows
              # once, onto both. Warm interpreters hold torch and FSDP2's and
              # DCP's modules, so a start costs no imports.
              extra=["--config", config, "--scaling-timeout", "3", "--warm-start",
                     "--warm-start-imports",
                     "torch,torch._dynamo,torch.distributed.fsdp,torch.distributed.checkpoint"],
              worker_args=["--ckpt", tmp_path / "ckpt", "--steps", str(STEPS),
                           "--dataset", str(DATASET), "--global-batch", str(GLOBAL_BATCH),
                           "--micro-batches", "1", "--step-s", STEP_S, "--step-log", log,
                           *(a for kv in SHAPE.items() for a in kv)])
    two_four_three(job, log)
    finish(job, marker, {1: 0, 2: 0, 3: 0})

    logged = step_log.by_step(log)
    gens = generations(logged)
    assert [world for _, world, _ in gens] == [2, 4, 3], gens
    check_steps(logged, overrides)
    check_resumed(log, gens)
    said = "\n".join(p.stdout() for p in job.agents.values())
    for n, entry in overrides.items():
        assert said.count(f"override: maxMicroBatchSize {entry['maxMicroBatchSize']}; "
                          f"{plans[n].describe()}") == 1, said
    assert f"[fsdp] done: {STEPS} steps" in said, said


def test_under_torchrun_the_example_trains_at_a_fixed_size_with_the_config_it_is_given(
        procs, marker, torchrun, elasticctl, tmp_path):  # noqa: F811
    config = tmp_path / "job.yaml"
    # torchrun's one node of 2 ranks: the entry for 1 node applies.
    overrides = emit_config(elasticctl, config, nodes="1", gpus_per_node=2)
    plan = plan_batches(GLOBAL_BATCH, 2, micro_batch_sizes(overrides[1], [1]))
    assert plan.micro_batches != (plan.micro_batches[0],) * 2, plan  # uneven, as planned
    log = tmp_path / "log"
    steps = 4
    env = launcher_env(marker, tmp_path / "tmp", OMP_NUM_THREADS="1", PYTHONPATH=str(PYTHON_SDK))
    proc = procs.spawn([torchrun, "--standalone", "--nproc-per-node", "2", TRAIN,
                        "--config", config, "--ckpt", tmp_path / "ckpt", "--steps", str(steps),
                        "--dataset", str(DATASET), "--global-batch", str(GLOBAL_BATCH),
                        "--micro-batches", "1", "--step-log", log,
                        *(a for kv in SHAPE.items() for a in kv)], "torchrun", env=env)
    assert proc.wait(RUN_TIMEOUT_S) == 0, proc.describe()
    assert f"[fsdp] done: {steps} steps" in proc.stdout(), proc.describe()
    logged = step_log.by_step(log)
    assert sorted(logged) == list(range(1, steps + 1))
    for step, ranks in logged.items():
        assert [e["micro"] for e in ranks] == list(plan.micro_batches), (step, ranks)
        assert {(e["world"], e["accum"], e["global_batch"]) for e in ranks} == {
            (2, plan.accum_steps, GLOBAL_BATCH)}, (step, ranks)
    assert [(s["what"], s["step"]) for s in step_log.states(log)] == [("loaded", 0),
                                                                      ("saved", steps)]
    assert not wait_marked_gone(marker)
