"""The C++ SDK's batch planner, permutation and elastic sampler against the
Python SDK's (python/elasticrun): for the same inputs the same plans, the
same permutation bit for bit, the same indices on every rank through
sequences of resizes, the same states, and refusals in the same places.

`sdk_tool` (test/tools/sdk_tool.cpp) answers a batch of queries through the
C++ SDK; the Python side answers them in process. Binary: $SDK_TOOL (CTest
sets it); by hand it defaults to build/dev/test/sdk_tool.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, _binary

sys.path.insert(0, str(REPO / "python"))
from elasticrun.batch import admissible_world_sizes, plan_batches  # noqa: E402
from elasticrun.sampler import ElasticSampler, _Permutation  # noqa: E402

TOOL_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def sdk_tool() -> Path:
    return _binary("SDK_TOOL", "build/dev/test/sdk_tool")


def ask(tool: Path, queries: list) -> list:
    proc = subprocess.run([tool], input=json.dumps(queries), capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    answers = json.loads(proc.stdout)
    assert len(answers) == len(queries)
    return answers


def python_plan(q: dict) -> dict:
    try:
        plan = plan_batches(q["g"], q["w"], q["sizes"], q["max_accum"])
    except ValueError as e:
        return {"error": str(e)}
    return {"micro_batches": list(plan.micro_batches), "accum_steps": plan.accum_steps,
            "describe": plan.describe()}


def test_both_languages_plan_every_batch_alike(sdk_tool):
    rng = random.Random(20240611)
    queries = [
        {"op": "plan", "g": 128, "w": 24, "sizes": [5, 6], "max_accum": 64},
        {"op": "plan", "g": 17, "w": 3, "sizes": [4, 6, 7], "max_accum": 64},
        {"op": "plan", "g": 128, "w": 200, "sizes": [1], "max_accum": 64},
        {"op": "plan", "g": 97, "w": 8, "sizes": [4], "max_accum": 3},
    ]
    for _ in range(400):
        sizes = sorted(rng.sample(range(1, 20), rng.randint(1, 5)))
        queries.append({"op": "plan", "g": rng.randint(1, 600), "w": rng.randint(1, 40),
                        "sizes": sizes, "max_accum": rng.choice([1, 4, 64])})
    answers = ask(sdk_tool, queries)
    planned = 0
    for q, got in zip(queries, answers):
        assert got == python_plan(q), q
        planned += "error" not in got
    # Both outcomes are exercised, not just refusals.
    assert 50 < planned < len(queries)
    assert answers[0]["describe"] == (
        "global batch 128 on 24 ranks = 8 ranks x 6 + 16 ranks x 5, 1 accumulation step")


def test_both_languages_admit_the_same_world_sizes(sdk_tool):
    rng = random.Random(7)
    queries = []
    for _ in range(100):
        queries.append({"op": "admissible", "g": rng.randint(1, 512),
                        "sizes": sorted(rng.sample(range(1, 17), rng.randint(1, 4))),
                        "candidates": rng.sample(range(1, 65), 10), "max_accum": 64})
    for q, got in zip(queries, ask(sdk_tool, queries)):
        assert got == {"sizes": admissible_world_sizes(q["g"], q["sizes"], q["candidates"],
                                                       q["max_accum"])}, q


def test_the_permutation_is_the_same_bit_for_bit(sdk_tool):
    rng = random.Random(3)
    queries = [
        {"op": "perm", "n": 1000, "seed": 42, "epoch": 3, "shuffle": True, "start": 0, "stop": 10},
        {"op": "perm", "n": 5, "seed": 0, "epoch": 0, "shuffle": True, "start": 0, "stop": 5},
        # The largest seed, a huge dataset (64-bit arithmetic on both sides).
        {"op": "perm", "n": 2**62 + 12345, "seed": 2**64 - 1, "epoch": 2**40, "shuffle": True,
         "start": 2**61, "stop": 2**61 + 50},
        {"op": "perm", "n": 77, "seed": 9, "epoch": 1, "shuffle": False, "start": 0, "stop": 77},
    ]
    for n in list(range(0, 40)) + [255, 256, 257, 4097, 100_003]:
        queries.append({"op": "perm", "n": n, "seed": rng.randrange(2**64),
                        "epoch": rng.randrange(100), "shuffle": True, "start": 0,
                        "stop": min(n, 3000)})
    answers = ask(sdk_tool, queries)
    # The values the Python suite pins.
    assert answers[0]["values"] == [692, 695, 15, 597, 790, 267, 473, 276, 201, 458]
    assert answers[1]["values"] == [3, 2, 1, 4, 0]
    for q, got in zip(queries, answers):
        want = _Permutation(q["n"], q["seed"], q["epoch"], q["shuffle"]).take(q["start"], q["stop"])
        assert got["values"] == want, q


def python_script(q: dict) -> list:
    s = ElasticSampler(q["n"], seed=q["seed"], shuffle=q["shuffle"], drop_last=q["drop_last"])
    out = []
    for cmd in q["script"]:
        try:
            name = cmd[0]
            if name == "world":
                s.set_world(cmd[1], cmd[2], cmd[3])
                out.append(None)
            elif name == "epoch":
                s.set_epoch(cmd[1])
                out.append(None)
            elif name == "advance":
                s.advance(cmd[1])
                out.append(None)
            elif name == "load":
                s.load_state_dict(cmd[1])
                out.append(None)
            elif name == "step":
                out.append(s.step_indices(cmd[1]))
            elif name == "indices":
                out.append(list(iter(s)))
            elif name == "len":
                out.append(len(s))
            elif name == "left":
                out.append(s.steps_left)
            elif name == "samples":
                out.append(s.next_step_samples)
            elif name == "state":
                out.append(s.state_dict())
            else:
                raise AssertionError(name)
        except (ValueError, RuntimeError) as e:  # C++: ConfigError, with the same message
            out.append({"error": str(e)})
    return out


def random_run(rng: random.Random, n: int) -> list:
    """A job's life: epochs, resizes to uneven local batches, steps; the
    same commands for each of its ranks."""
    script = []
    for epoch in range(2):
        script.append(["epoch", epoch])
        for _ in range(rng.randint(1, 4)):
            world = rng.randint(1, 6)
            local = [rng.randint(1, 9) for _ in range(world)]
            script.append(["world", "RANK", world, local])
            script += [["left"], ["samples"], ["len"], ["step", 0], ["step", 1]]
            script.append(["advance", rng.randint(0, 3)])
            script.append(["state"])
        script.append(["indices"])
    return script


def test_every_rank_gets_the_same_indices_in_both_languages_across_resizes(sdk_tool):
    rng = random.Random(11)
    queries = []
    for case in range(60):
        n = rng.choice([0, 1, 7, 50, 333, 1000])
        script = random_run(rng, n)
        # Every rank the script's worlds have; a rank outside one is refused
        # alike, and the script goes on.
        for rank in range(3):
            queries.append({"op": "sampler", "n": n, "seed": rng.randrange(2**64),
                            "shuffle": case % 5 != 0, "drop_last": case % 2 == 0,
                            "script": [[c[0], rank, *c[2:]] if c[0] == "world" else c
                                       for c in script]})
    answers = ask(sdk_tool, queries)
    errors = 0
    for q, got in zip(queries, answers):
        want = python_script(q)
        assert got["out"] == want, q
        errors += sum(isinstance(x, dict) and "error" in x for x in want)
    assert errors > 0  # refusals (passing the epoch's end, ranks outside) are compared too


def test_a_state_moves_between_languages_and_foreign_states_are_refused_alike(sdk_tool):
    state = {"version": 1, "dataset_len": 100, "seed": 5, "shuffle": 1, "epoch": 2, "position": 40}
    base = {"op": "sampler", "n": 100, "seed": 5, "shuffle": True, "drop_last": False}
    queries = [
        dict(base, script=[["load", state], ["world", 1, 3, [4, 5, 6]], ["state"], ["step", 0],
                           ["indices"]]),
        dict(base, script=[["load", dict(state, seed=6)]]),
        dict(base, script=[["load", dict(state, dataset_len=99)]]),
        dict(base, script=[["load", dict(state, shuffle=0)]]),
        dict(base, script=[["load", dict(state, version=2)]]),
        dict(base, script=[["load", dict(state, position=101)]]),
        dict(base, script=[["step", 0]]),  # no world yet
    ]
    answers = ask(sdk_tool, queries)
    assert answers[0]["out"][2] == state
    for q, got in zip(queries, answers):
        assert got["out"] == python_script(q), q
    assert [len(a["out"]) == 1 and "error" in a["out"][0] for a in answers[1:]] == [True] * 6
    assert "set_world" in answers[-1]["out"][0]["error"]
