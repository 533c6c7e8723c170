"""A fixed script of torch.distributed.TCPStore client calls for PyTorch 1.13.

Runs under Debian's /usr/bin/python3 with its torch 1.13, whose client speaks
the pre-2.2 dialect: no VALIDATE handshake, SET=0 ... DELETE_KEY=8, and a
second idle "callback" connection per store object.

Usage: python3 legacy_client_ops.py HOST PORT
Prints a JSON list of [step, result] pairs (bytes decoded as latin-1, errors
as {"error": class name}), comparable between two servers.

A 1.13 client that times out in wait() leaves its connection out of sync
(it just stops reading; there is no CANCEL_WAIT), so the timing-out wait uses
a throwaway store object and the script carries on with the main one.
"""

import json
import sys
import threading
from datetime import timedelta

import torch.distributed as dist

TIMEOUT = timedelta(seconds=10)


def connect(host, port):
    return dist.TCPStore(host, port, is_master=False, timeout=TIMEOUT)


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    store = connect(host, port)
    results = []

    def step(name, fn):
        try:
            value = fn()
        except Exception as e:  # the class name is the result we compare
            value = {"error": type(e).__name__}
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        results.append([name, value])

    step("num_keys on a fresh store", lambda: store.num_keys())
    step("set a", lambda: store.set("legacy/a", "alpha"))
    step("get a", lambda: store.get("legacy/a"))
    step("add n +5", lambda: store.add("legacy/n", 5))
    step("add n -2", lambda: store.add("legacy/n", -2))
    step("get n", lambda: store.get("legacy/n"))
    step("compare_set missing key, empty expected",
         lambda: store.compare_set("legacy/cas", "", "v1"))
    step("compare_set missing key, non-empty expected",
         lambda: store.compare_set("legacy/cas_absent", "x", "y"))
    step("compare_set match", lambda: store.compare_set("legacy/cas", "v1", "v2"))
    step("compare_set mismatch", lambda: store.compare_set("legacy/cas", "nope", "v3"))
    step("get cas", lambda: store.get("legacy/cas"))
    # torch 1.13's Python TCPStore has no check(); probe it only if present.
    if hasattr(store, "check"):
        step("check present", lambda: store.check(["legacy/a"]))
        step("check missing", lambda: store.check(["legacy/missing"]))
    step("wait present", lambda: store.wait(["legacy/a", "legacy/n"]))
    step("wait present with timeout",
         lambda: store.wait(["legacy/a"], timedelta(seconds=5)))

    def timed_out_wait():
        throwaway = connect(host, port)
        try:
            throwaway.wait(["legacy/never"], timedelta(milliseconds=300))
        finally:
            del throwaway

    step("wait missing 300ms on a second client", timed_out_wait)
    step("get a after another client's timed-out wait", lambda: store.get("legacy/a"))

    # A wait blocked on one connection is released by a set on another.
    waiter = connect(host, port)
    outcome = {}

    def blocked_wait():
        try:
            waiter.wait(["legacy/late"])
            outcome["result"] = waiter.get("legacy/late").decode("latin-1")
        except Exception as e:
            outcome["result"] = {"error": type(e).__name__}

    t = threading.Thread(target=blocked_wait, daemon=True)
    t.start()
    # Give the waiter a moment to register, so the set below usually has to
    # wake it; if it has not yet, its wait simply returns at once. Either way
    # the result is the same: this is coverage, not a timing claim.
    t.join(timeout=0.5)
    step("set late while another client waits", lambda: store.set("legacy/late", "here"))
    t.join(timeout=30)
    results.append(["waiting client sees the late key",
                    outcome.get("result", {"error": "still waiting"})])

    step("num_keys", lambda: store.num_keys())
    step("delete_key present", lambda: store.delete_key("legacy/a"))
    step("delete_key missing", lambda: store.delete_key("legacy/a"))
    step("num_keys after delete", lambda: store.num_keys())

    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
