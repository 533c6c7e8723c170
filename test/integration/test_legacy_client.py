"""PyTorch 1.13's TCPStore client (Debian's python3-torch) against our server.

A 1.13 client sends no VALIDATE; our server must recognise the old numbering
(SET=0 ... DELETE_KEY=8) from the first request and tolerate the idle second
"callback" connection each 1.13 store object opens. The oracle is 1.13's own
server, running the same script.
"""

import json

from conftest import WORKERS, handshake, legacy_env

CLIENT_TIMEOUT_S = 180  # bounds a hang; the client's store timeout is 10 s


def run_legacy_client(procs, python, server, name):
    proc = procs.run(
        [python, WORKERS / "legacy_client_ops.py", server.host, server.port],
        "torch1-client",
        timeout=CLIENT_TIMEOUT_S,
        env=legacy_env(),
    )
    assert proc.popen.returncode == 0, f"1.13 client against {name} failed\n{proc.describe()}"
    return json.loads(proc.stdout())


def test_a_torch_1_13_client_gets_the_expected_answers_from_our_server(
    procs, legacy_python, our_store
):
    r = dict(run_legacy_client(procs, legacy_python, our_store, "elasticctl store"))
    assert r["num_keys on a fresh store"] == 0
    assert r["get a"] == "alpha"
    assert r["add n +5"] == 5
    assert r["add n -2"] == 3
    assert r["get n"] == "3"
    assert r["compare_set missing key, empty expected"] == "v1"
    assert r["compare_set missing key, non-empty expected"] == "x"
    assert r["compare_set match"] == "v2"
    assert r["compare_set mismatch"] == "v2"
    assert r["get cas"] == "v2"
    assert r["wait present"] is None
    assert r["wait missing 300ms on a second client"] == {"error": "RuntimeError"}
    assert r["get a after another client's timed-out wait"] == "alpha"
    assert r["waiting client sees the late key"] == "here"
    assert r["num_keys"] == 4
    assert r["delete_key present"] is True
    assert r["delete_key missing"] is False
    assert r["num_keys after delete"] == 3
    # The legacy connections must not have disturbed the server for a
    # modern client.
    with handshake(our_store.host, our_store.port):
        pass


def test_a_torch_1_13_client_gets_the_same_answers_from_our_server_as_from_torch_1_13s(
    procs, legacy_python, legacy_torch_store, our_store
):
    theirs = run_legacy_client(procs, legacy_python, legacy_torch_store, "torch 1.13's server")
    ours = run_legacy_client(procs, legacy_python, our_store, "elasticctl store")
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    mismatches = [
        f"{t[0]}: torch 1.13 {json.dumps(t[1])} vs ours {json.dumps(o[1])}"
        for t, o in zip(theirs, ours)
        if t != o
    ]
    assert not mismatches, "\n".join(mismatches)
