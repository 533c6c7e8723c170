"""elasticrun's C++ StoreClient (via store_ops) against PyTorch's server and ours.

store_ops runs a fixed script and prints one JSON line per step; both stores
must give the same answers, step for step.
"""

import json

OPS_TIMEOUT_S = 120  # bounds a hang; store_ops itself uses 5 s per call


def run_store_ops(procs, store_ops_bin, server, name):
    proc = procs.run(
        [store_ops_bin, server.host, server.port], "store-ops", timeout=OPS_TIMEOUT_S
    )
    assert proc.popen.returncode == 0, f"store_ops against {name} failed\n{proc.describe()}"
    steps = [json.loads(line) for line in proc.stdout().splitlines() if line.strip()]
    assert steps, f"store_ops printed nothing against {name}"
    return steps


def as_dict(steps):
    result = {s["op"]: s["result"] for s in steps}
    assert len(result) == len(steps), "store_ops step names must be unique"
    return result


def test_store_ops_against_torch_server_gives_the_expected_answers(
    procs, store_ops_bin, torch_store
):
    r = as_dict(run_store_ops(procs, store_ops_bin, torch_store, "torch's server"))
    # Spot checks of PyTorch's semantics, so the comparison below cannot pass
    # with two equally wrong outputs (e.g. every step an error).
    assert r["get a"] == "alpha"
    assert r["add n +5"] == 5
    assert r["add n -2"] == 3
    assert r["get n"] == "3"
    assert r["compare_set missing key, empty expected"] == "v1"
    assert r["compare_set missing key, non-empty expected"] == "x"
    assert r["check cas_absent after failed compare_set"] is False
    assert r["compare_set match"] == "v2"
    assert r["compare_set mismatch"] == "v2"
    assert r["check present"] is True
    assert r["check missing"] is False
    assert r["wait missing 300ms"] == {"error": "TimeoutError"}
    assert r["get a after timed-out wait"] == "alpha"
    assert r["num_keys"] == 3
    assert r["delete_key present"] is True
    assert r["delete_key missing"] is False
    assert r["get log"] == "abcd"
    assert r["multi_get"] == ["z z", "x", ""]
    assert r["queue_len 2"] == 2
    assert r["queue_pop first"] == "first"
    assert r["queue_pop second"] == "second"
    assert r["queue_pop empty 300ms"] == {"error": "TimeoutError"}
    assert r["list_keys"] == ["ops/cas", "ops/log", "ops/m1", "ops/m2", "ops/m3", "ops/n"]
    assert r["barrier world_size 1"] is None
    assert r["get barrier counter"] == "1"


def test_store_ops_gets_identical_answers_from_our_server_and_torchs(
    procs, store_ops_bin, torch_store, our_store
):
    theirs = run_store_ops(procs, store_ops_bin, torch_store, "torch's server")
    ours = run_store_ops(procs, store_ops_bin, our_store, "elasticctl store")
    assert [s["op"] for s in ours] == [s["op"] for s in theirs]
    mismatches = [
        f"{t['op']}: torch {json.dumps(t['result'])} vs ours {json.dumps(o['result'])}"
        for t, o in zip(theirs, ours)
        if t != o
    ]
    assert not mismatches, "\n".join(mismatches)
    assert any(s["result"] not in (None, {"error": "TimeoutError"}) for s in ours)
