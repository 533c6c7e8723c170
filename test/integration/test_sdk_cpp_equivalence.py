"""The C++ SDK's batch planner, permutation, elastic sampler, discrete-values
flag and job config overrides against the Python SDK's (python/elasticrun):
for the same inputs the same plans, the same permutation bit for bit, the
same indices on every rank through sequences of resizes, the same states,
the same flags and overrides, and refusals in the same places.

`sdk_tool` (test/tools/sdk_tool.cpp) answers a batch of queries through the
C++ SDK; the Python side answers them in process. Binary: $SDK_TOOL (CTest
sets it); by hand it defaults to build/dev/test/sdk_tool.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, _binary, elasticctl  # noqa: F401 (fixture)

sys.path.insert(0, str(REPO / "python"))
from elasticrun.batch import (  # noqa: E402
    CONFIG_FILE_ENV,
    admissible_world_sizes,
    discrete_values_flag,
    load_overrides,
    micro_batch_sizes,
    plan_batches,
)
from elasticrun.sampler import ElasticSampler, _Permutation  # noqa: E402

TOOL_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def sdk_tool() -> Path:
    return _binary("SDK_TOOL", "build/dev/test/sdk_tool")


def ask(tool: Path, queries: list, env: dict | None = None) -> list:
    proc = subprocess.run([tool], input=json.dumps(queries), capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, env=env)
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
        # A refused range is named by its ends: [1..1024, 2000].
        {"op": "plan", "g": 10, "w": 20, "sizes": [*range(1, 1025), 2000], "max_accum": 64},
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
    assert "micro-batch sizes [1..1024, 2000] and" in answers[4]["error"]


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


def python_flag(q: dict) -> dict:
    overrides = {int(nodes): entry for nodes, entry in q["overrides"].items()}
    try:
        return {"flag": discrete_values_flag(q["g"], q["sizes"], q["nproc"], q["nodes"],
                                             q["max_accum"], overrides)}
    except ValueError as e:
        return {"error": str(e)}


def random_flag_query(rng: random.Random) -> dict:
    lo = rng.randint(1, 8)
    nodes = list(range(lo, lo + rng.randint(0, 12) + 1))
    overrides = {}
    for n in nodes:
        if rng.random() < 0.4:
            high = rng.randint(1, 32)
            overrides[str(n)] = rng.choice([{"microBatchSize": rng.randint(1, 32)},
                                            {"learningRate": rng.random()},
                                            {"learningRate": 0.1,
                                             "microBatchSize": rng.randint(1, 32)},
                                            {"maxMicroBatchSize": high},
                                            {"minMicroBatchSize": rng.randint(1, high),
                                             "maxMicroBatchSize": high}])
    return {"op": "flag", "g": rng.choice([rng.randint(1, 2048), 2 ** rng.randint(0, 11)]),
            "sizes": sorted(rng.sample(range(1, 33), rng.randint(1, 4))),
            "nproc": rng.choice([1, 2, 4, 8, rng.randint(1, 8)]),
            "nodes": rng.sample(nodes, len(nodes)),  # any order, as Python takes any iterable
            "max_accum": rng.choice([1, 4, 64]), "overrides": overrides}


def test_both_languages_give_the_same_discrete_values_flag(sdk_tool):
    rng = random.Random(20240612)
    base = {"op": "flag", "g": 128, "sizes": [8], "nproc": 4, "nodes": list(range(1, 9)),
            "max_accum": 64, "overrides": {}}
    queries = [
        base,  # the example of docs/sdk-python.md
        dict(base, overrides={"8": {"microBatchSize": 4, "learningRate": 0.1}, "3": {}}),
        dict(base, nodes=[]),
        dict(base, nodes=[3, 0]),
        dict(base, overrides={"2": {"microBatchSize": 0}}),
        dict(base, g=7, sizes=[8]),
    ]
    queries += [random_flag_query(rng) for _ in range(500)]
    answers = ask(sdk_tool, queries)
    for q, got in zip(queries, answers):
        assert got == python_flag(q), q
    assert answers[0] == {"flag": "--replica-discrete-values 1,2,4"}
    assert answers[1] == {"flag": "--replica-discrete-values 1,2,4,8"}
    assert "no node count in [] admits" in answers[2]["error"]
    assert answers[3] == {"error": "a node count must be at least 1, got 0"}
    assert answers[4] == {"error": "a micro-batch size must be at least 1, got 0"}
    # Both outcomes, and overrides that change the answer, are exercised.
    flags = [a for a in answers if "flag" in a]
    assert 100 < len(flags) < len(answers)
    changed = sum(python_flag(q) != python_flag(dict(q, overrides={}))
                  for q in queries[6:] if q["overrides"])
    assert changed > 20


def python_sizes(q: dict) -> dict:
    try:
        return {"sizes": list(_as_sizes(micro_batch_sizes(q["override"], q["default"])))}
    except ValueError as e:
        return {"error": str(e)}


def _as_sizes(sizes) -> list:
    return [sizes] if isinstance(sizes, int) else sizes


def test_both_languages_take_the_same_sizes_from_an_override_and_refuse_the_same(sdk_tool):
    rng = random.Random(5)
    queries = [
        {"op": "sizes", "override": {}, "default": [4, 6]},
        {"op": "sizes", "override": {"learningRate": 0.5}, "default": [4, 6]},
        {"op": "sizes", "override": {"microBatchSize": 3}, "default": [4, 6]},
        {"op": "sizes", "override": {"maxMicroBatchSize": 3}, "default": [4, 6]},
        {"op": "sizes", "override": {"minMicroBatchSize": 2, "maxMicroBatchSize": 5},
         "default": [4]},
        {"op": "sizes", "override": {"microBatchSize": 3, "maxMicroBatchSize": 4}, "default": [1]},
        {"op": "sizes", "override": {"minMicroBatchSize": 2}, "default": [1]},
        {"op": "sizes", "override": {"minMicroBatchSize": 5, "maxMicroBatchSize": 4},
         "default": [1]},
        {"op": "sizes", "override": {"maxMicroBatchSize": 0}, "default": [1]},
        {"op": "sizes", "override": {"minMicroBatchSize": 0, "maxMicroBatchSize": 1},
         "default": [1]},
        {"op": "sizes", "override": {"maxMicroBatchSize": (1 << 20) + 1}, "default": [1]},
    ]
    keys = ["microBatchSize", "minMicroBatchSize", "maxMicroBatchSize"]
    for _ in range(200):
        override = {k: rng.randint(0, 9) for k in keys if rng.random() < 0.5}
        queries.append({"op": "sizes", "override": override, "default": [rng.randint(1, 9)]})
    answers = ask(sdk_tool, queries)
    for q, got in zip(queries, answers):
        assert got == python_sizes(q), q
    assert answers[3] == {"sizes": [1, 2, 3]}
    assert answers[4] == {"sizes": [2, 3, 4, 5]}
    assert ["error" in a for a in answers[5:11]] == [True] * 6
    # Both outcomes, over random entries too.
    assert 20 < sum("error" in a for a in answers[11:]) < 180


def test_a_config_elasticctl_plan_emits_is_read_alike_and_planned_within_its_ranges(
        sdk_tool, elasticctl, tmp_path):  # noqa: F811
    config = tmp_path / "job.yaml"
    # 3 nodes (24 ranks) do not divide the global batch 256: only an uneven
    # split keeps it, which a range allows.
    emit = subprocess.run([elasticctl, "plan", "--preset", "8b", "--seq-len", "8192",
                           "--sharding", "fsdp", "--activation-checkpointing", "full",
                           "--gpu-memory", "80", "--global-batch", "256", "--world-sizes", "1:4",
                           "--gpus-per-node", "8", "--emit-config", config],
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert emit.returncode == 0, emit.stderr
    want = load_overrides(config)
    (got,) = ask(sdk_tool, [{"op": "overrides", "path": str(config)}])
    assert same_numbers(cpp_overrides(got)["overrides"], want), config.read_text()
    assert sorted(want) == [1, 2, 3, 4], config.read_text()
    queries = []
    for nodes, entry in sorted(want.items()):
        assert set(entry) == {"maxMicroBatchSize"}, entry
        sizes = list(micro_batch_sizes(entry, [1024]))
        queries.append({"op": "plan", "g": 256, "w": nodes * 8, "sizes": sizes, "max_accum": 64})
    for q, got in zip(queries, ask(sdk_tool, queries)):
        assert got == python_plan(q), q
        top = q["sizes"][-1]
        assert all(1 <= m <= top for m in got["micro_batches"]), (q, got)
        assert sum(got["micro_batches"]) * got["accum_steps"] == 256, (q, got)
        # The comment after the entry is the split both SDKs make.
        line = next(t for t in config.read_text().splitlines()
                    if t.startswith(f"  {q['w'] // 8}: "))
        assert line.endswith(got["describe"].split(" = ", 1)[1]), (line, got)


# --- worldSizeOverrides of the job config file -------------------------------

def _python_override_cases():
    """test/python/test_overrides.py, loaded under a name of its own so that
    its cases are compared here as they are written there."""
    spec = importlib.util.spec_from_file_location(
        "python_sdk_override_cases", REPO / "test" / "python" / "test_overrides.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PY_CASES = _python_override_cases()


def _parametrized(test) -> list:
    (mark,) = [m for m in test.pytestmark if m.name == "parametrize"]
    return list(mark.args[1])


def docs_yaml_blocks() -> list[str]:
    text = (REPO / "docs" / "job-config.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert blocks, "docs/job-config.md has no yaml example"
    return blocks


# Files both read alike: the examples of the docs and of test_overrides.py.
ACCEPTED = docs_yaml_blocks() + [PY_CASES.DOCS_EXAMPLE] + _parametrized(
    PY_CASES.test_a_file_without_overrides_gives_none) + [
    # The bodies of two cases of test_overrides.py that are written inline there.
    textwrap.dedent("""\
        worldSizeOverrides:   # per size
          3:
            learningRate: 1e-4   # not a string, as elasticrun reads it
          5: {microBatchSize: +6}
        elasticPolicy: {minReplicas: 1, maxReplicas: 5}
        """),
    textwrap.dedent("""\
        worldSizeOverrides: {2: {learningRate: 0.5,
                                 microBatchSize: 4},
                             16: {microBatchSize: 1}}
        """),
]

# Files both refuse: the sections test_overrides.py expects refused.
REFUSED = ["worldSizeOverrides:\n" + body + "\n"
           for body, _ in _parametrized(
               PY_CASES.test_a_section_elasticrun_would_refuse_is_refused_with_its_line)]


def python_overrides(path) -> dict:
    try:
        return {"overrides": load_overrides(path)}
    except (ValueError, OSError) as e:
        return {"error": str(e)}


def cpp_overrides(answer: dict) -> dict:
    if "error" in answer:
        return answer
    return {"overrides": {int(nodes): entry for nodes, entry in answer["overrides"].items()}}


def same_numbers(a: dict, b: dict) -> bool:
    """Equal overrides, floats bit for bit and ints as ints."""
    def exact(entries):
        return {n: {k: (type(v).__name__, struct.pack("<d", v) if isinstance(v, float) else v)
                    for k, v in e.items()} for n, e in entries.items()}
    return exact(a) == exact(b)


def write_files(tmp_path: Path, texts: list) -> list:
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"job{i}.yaml"
        path.write_text(text)
        paths.append(path)
    return paths


def test_both_languages_read_the_example_config_files_alike(sdk_tool, tmp_path):
    paths = write_files(tmp_path, ACCEPTED)
    answers = ask(sdk_tool, [{"op": "overrides", "path": str(p)} for p in paths])
    nonempty = 0
    for path, answer in zip(paths, answers):
        want, got = python_overrides(path), cpp_overrides(answer)
        assert "error" not in got and "error" not in want, (path.read_text(), got, want)
        assert same_numbers(got["overrides"], want["overrides"]), path.read_text()
        nonempty += bool(want["overrides"])
    assert nonempty >= 4
    assert cpp_overrides(answers[0])["overrides"] == {
        2: {"learningRate": 1.0e-4, "microBatchSize": 32},
        4: {"learningRate": 2.0e-4, "microBatchSize": 16},
        8: {"learningRate": 4.0e-4, "microBatchSize": 8}}


def _line(message: str):
    m = re.search(r", line (\d+):", message)
    return m and int(m.group(1))


def test_both_languages_refuse_the_same_bad_sections_naming_file_and_line(sdk_tool, tmp_path):
    paths = write_files(tmp_path, REFUSED)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    missing = tmp_path / "missing.yaml"
    paths += [big, missing]
    answers = ask(sdk_tool, [{"op": "overrides", "path": str(p)} for p in paths])
    same_line = 0
    for path, answer in zip(paths, answers):
        want, got = python_overrides(path), cpp_overrides(answer)
        assert "error" in want and "error" in got, (path, want, got)
        assert str(path) in got["error"], got
        if _line(want["error"]) is None:
            continue
        if "not valid YAML" in got["error"]:
            # yaml-cpp names the line where it found the text broken (for
            # an unclosed "{", the end of the file), never an earlier one.
            assert _line(got["error"]) >= _line(want["error"]), (want, got)
        else:
            assert _line(got["error"]) == _line(want["error"]), (want, got)
        same_line += _line(got["error"]) == _line(want["error"])
    assert same_line >= len(REFUSED) - 1
    assert "cannot open: No such file or directory" in answers[-1]["error"]


def random_number_text(rng: random.Random, integer: bool) -> str:
    sign = rng.choice(["", "", "+"])
    if integer:
        return sign + "0" * rng.randint(0, 2) + str(rng.randint(1, 4096))
    if rng.random() < 0.03:
        return "-0.0"  # not negative: both keep it, as -0.0
    mantissa = rng.choice([f"{rng.randint(0, 999)}.{rng.randint(0, 999999):0{rng.randint(1, 6)}d}",
                           f"{rng.randint(0, 99)}.", f".{rng.randint(0, 99999)}",
                           str(rng.randint(0, 10 ** rng.randint(1, 19)))])
    if rng.random() < 0.6:
        mantissa += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 30))
    return sign + mantissa


def random_config(rng: random.Random) -> str:
    lines = ["# generated"]
    if rng.random() < 0.5:
        lines += ["elasticPolicy:", "  minReplicas: 1", "  maxReplicas: 64"]
    entries = []
    for nodes in rng.sample(range(1, 65), rng.randint(1, 6)):
        items = []
        if rng.random() < 0.8:
            items.append(("learningRate", random_number_text(rng, False)))
        if rng.random() < 0.3:
            high = random_number_text(rng, True)
            items.append(("maxMicroBatchSize", high))
            if rng.random() < 0.5:
                low = rng.randint(1, int(high))
                items.append(("minMicroBatchSize", rng.choice(["", "+", "0"]) + str(low)))
        elif rng.random() < 0.8 or not items:
            items.append(("microBatchSize", random_number_text(rng, True)))
        rng.shuffle(items)
        key = rng.choice(["", "0"]) + str(nodes)
        entries.append((key, items))
    if rng.random() < 0.3:
        flow = ", ".join(k + ": {" + ", ".join(f"{n}: {v}" for n, v in items) + "}"
                         for k, items in entries)
        lines.append("worldSizeOverrides: {" + flow + "}")
    else:
        lines.append("worldSizeOverrides:  # per node count")
        for key, items in entries:
            if rng.random() < 0.5:
                lines.append(f"  {key}: {{" + ", ".join(f"{n}: {v}" for n, v in items) + "}")
            else:
                lines.append(f"  {key}:")
                lines += [f"    {n}: {v}   # a comment" if rng.random() < 0.3 else f"    {n}: {v}"
                          for n, v in items]
    return "\n".join(lines) + "\n"


def test_both_languages_read_random_override_sections_to_the_same_numbers(sdk_tool, tmp_path):
    rng = random.Random(99)
    paths = write_files(tmp_path, [random_config(rng) for _ in range(300)])
    answers = ask(sdk_tool, [{"op": "overrides", "path": str(p)} for p in paths])
    for path, answer in zip(paths, answers):
        want, got = python_overrides(path), cpp_overrides(answer)
        assert "error" not in want, (path.read_text(), want)
        assert "error" not in got, (path.read_text(), got)
        assert same_numbers(got["overrides"], want["overrides"]), path.read_text()


def test_the_file_the_agent_names_is_read_by_default_in_both_languages(sdk_tool, tmp_path):
    (path,) = write_files(tmp_path, [PY_CASES.DOCS_EXAMPLE])
    env = dict(os.environ)
    env[CONFIG_FILE_ENV] = str(path)
    assert cpp_overrides(ask(sdk_tool, [{"op": "overrides"}], env)[0]) == {
        "overrides": load_overrides(path)}
    for unset in ({CONFIG_FILE_ENV: ""}, {}):
        env = {k: v for k, v in os.environ.items() if k != CONFIG_FILE_ENV} | unset
        assert ask(sdk_tool, [{"op": "overrides"}], env) == [{"overrides": {}}]
    env[CONFIG_FILE_ENV] = str(tmp_path / "gone.yaml")
    (answer,) = ask(sdk_tool, [{"op": "overrides"}], env)
    assert CONFIG_FILE_ENV in answer["error"] and "gone.yaml" in answer["error"]


# Where the two part, on purpose. The C++ SDK reads the file with the agent's
# parser, so it reads what the agent started the job with and refuses what
# the agent refuses; Python's reader looks only at the section and refuses
# YAML forms it does not implement. These pin the difference: if one side
# changes, this says so.
CPP_ONLY = [
    # Anchors and aliases, tags: full YAML, which the agent accepts.
    "worldSizeOverrides:\n  2: &base {learningRate: 0.1, microBatchSize: 4}\n  4: *base\n",
    "worldSizeOverrides:\n  2: {learningRate: !!float 1, microBatchSize: 4}\n",
    "{worldSizeOverrides: {2: {microBatchSize: 4}}}\n",
]
PYTHON_ONLY = [
    # Files the agent refuses, so no worker ever reads them.
    "elasticPolicy:\n  maxReplica: 4\nworldSizeOverrides:\n  2: {microBatchSize: 4}\n",
    "worldSizeOverrides:\n  2: {microBatchSize: 4}\n---\nelasticPolicy: {}\n",
    "worldSizeOverrides:\n  2: {microBatchSize: 4}\nworldSizeOverrides:\n  4: {microBatchSize: 2}\n",
    "worldSizeOverrides:\n  2: {microBatchSize: 3000000000}\n",
]


def test_where_the_readers_part_the_cpp_sdk_follows_the_agent(sdk_tool, tmp_path):
    paths = write_files(tmp_path, CPP_ONLY + PYTHON_ONLY)
    answers = ask(sdk_tool, [{"op": "overrides", "path": str(p)} for p in paths])
    for path, answer in zip(paths[:len(CPP_ONLY)], answers):
        assert "overrides" in answer, (path.read_text(), answer)
        assert "error" in python_overrides(path), path.read_text()
    for path, answer in zip(paths[len(CPP_ONLY):], answers[len(CPP_ONLY):]):
        assert "error" in answer and str(path) in answer["error"], (path.read_text(), answer)
        assert "overrides" in python_overrides(path), path.read_text()
    assert cpp_overrides(answers[0])["overrides"] == {
        2: {"learningRate": 0.1, "microBatchSize": 4},
        4: {"learningRate": 0.1, "microBatchSize": 4}}
