"""torch.distributed.TCPStore as a client of `elasticctl store`.

The same script of client calls (workers/torch_client_ops.py) runs against
PyTorch's own server and against ours, each time in a fresh Python process:
the client must never share an interpreter with a torch server, and a
subprocess also bounds a hang.
"""

import json
import sys

from conftest import WORKERS, venv_env

CLIENT_TIMEOUT_S = 180  # bounds a hang; the client's store timeout is 10 s


def run_torch_client(procs, server, name):
    proc = procs.run(
        [sys.executable, WORKERS / "torch_client_ops.py", server.host, server.port],
        "torch-client",
        timeout=CLIENT_TIMEOUT_S,
        env=venv_env(),
    )
    assert proc.popen.returncode == 0, f"torch client against {name} failed\n{proc.describe()}"
    return json.loads(proc.stdout())


def test_torch_client_gets_the_same_answers_from_our_server_as_from_torchs(
    procs, torch_store, our_store
):
    theirs = run_torch_client(procs, torch_store, "torch's server")
    ours = run_torch_client(procs, our_store, "elasticctl store")

    assert [name for name, _ in ours] == [name for name, _ in theirs]
    mismatches = [
        f"{t[0]}: torch {json.dumps(t[1])} vs ours {json.dumps(o[1])}"
        for t, o in zip(theirs, ours)
        if t != o
    ]
    assert not mismatches, "\n".join(mismatches)

    # Spot checks, so that two equally broken runs cannot pass.
    r = dict(ours)
    assert r["get a"] == "alpha"
    assert r["add n -2"] == 3
    assert r["compare_set missing key, empty expected"] == "v1"
    assert r["compare_set missing key, non-empty expected"] == "x"
    assert r["compare_set mismatch"] == "v2"
    assert r["check missing"] is False
    assert r["wait missing 300ms"] == {"error": "DistStoreError"}
    assert r["get a after timed-out wait"] == "alpha"
    assert r["wait formerly missing"] is None
    assert r["num_keys"] == 4
    assert r["delete_key present"] is True
    assert r["delete_key missing"] is False
    assert r["get log"] == "abcd"
    assert r["multi_get"] == ["z z", "x", ""]
    assert r["queue_pop non-blocking on missing queue"] == {"error": "QueueEmptyError"}
    assert r["queue_len 2"] == 2
    assert r["queue_pop first"] == "first"
    assert r["queue_pop second non-blocking"] == "second"
    assert r["queue_pop non-blocking on empty queue"] == {"error": "QueueEmptyError"}
    assert r["list_keys"] == ["ops/cas", "ops/log", "ops/m1", "ops/m2", "ops/m3", "ops/missing", "ops/n"]
    assert r["get barrier counter"] == "1"
    assert r["barrier world_size 2 alone times out"] == {"error": "DistStoreError"}
    assert r["get n after timed-out barrier"] == "3"
