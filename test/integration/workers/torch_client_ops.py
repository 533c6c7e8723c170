"""Runs a fixed script of torch.distributed.TCPStore client calls.

Usage: python torch_client_ops.py HOST PORT
Prints one JSON document on stdout: a list of [step, result] pairs, where a
result is None, a bool, an int, a str (bytes decoded as latin-1), a list, or
{"error": "<exception class name>"}. The integration suite runs this against
`elasticctl store` and against PyTorch's own server and compares the lists.
The script must stay deterministic: fixed keys, sorted list_keys, no timings.

It runs in its own process, never in the one hosting a torch server: queue
calls hold the GIL while they block.
"""

import json
import sys
from datetime import timedelta

import torch.distributed as dist


def _encode(value):
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def run_script(store):
    results = []

    def step(name, fn):
        try:
            value = _encode(fn())
        except Exception as e:  # the class name is the result we compare
            value = {"error": type(e).__name__}
        results.append([name, value])

    short = timedelta(milliseconds=300)

    step("set a", lambda: store.set("ops/a", "alpha"))
    step("get a", lambda: store.get("ops/a"))
    step("add n +5", lambda: store.add("ops/n", 5))
    step("add n -2", lambda: store.add("ops/n", -2))
    step("get n", lambda: store.get("ops/n"))

    step("compare_set missing key, empty expected",
         lambda: store.compare_set("ops/cas", "", "v1"))
    step("compare_set missing key, non-empty expected",
         lambda: store.compare_set("ops/cas_absent", "x", "y"))
    step("check cas_absent after failed compare_set",
         lambda: store.check(["ops/cas_absent"]))
    step("compare_set match", lambda: store.compare_set("ops/cas", "v1", "v2"))
    step("compare_set mismatch", lambda: store.compare_set("ops/cas", "nope", "v3"))
    step("get cas", lambda: store.get("ops/cas"))

    step("check present", lambda: store.check(["ops/a", "ops/n"]))
    step("check missing", lambda: store.check(["ops/a", "ops/missing"]))
    step("wait present", lambda: store.wait(["ops/a", "ops/n"]))
    step("wait present with timeout", lambda: store.wait(["ops/a"], short))
    step("wait missing 300ms", lambda: store.wait(["ops/missing"], short))
    # The timed-out wait was cancelled on the server; the connection must
    # still answer in order.
    step("get a after timed-out wait", lambda: store.get("ops/a"))
    step("set missing", lambda: store.set("ops/missing", "late"))
    step("wait formerly missing", lambda: store.wait(["ops/missing"], short))

    step("num_keys", lambda: store.num_keys())
    step("delete_key present", lambda: store.delete_key("ops/a"))
    step("delete_key missing", lambda: store.delete_key("ops/a"))
    step("check deleted", lambda: store.check(["ops/a"]))
    step("num_keys after delete", lambda: store.num_keys())

    step("append new", lambda: store.append("ops/log", "ab"))
    step("append existing", lambda: store.append("ops/log", "cd"))
    step("get log", lambda: store.get("ops/log"))

    step("multi_set", lambda: store.multi_set(["ops/m1", "ops/m2", "ops/m3"],
                                              ["x", "", "z z"]))
    step("multi_get", lambda: store.multi_get(["ops/m3", "ops/m1", "ops/m2"]))

    step("queue_len missing", lambda: store.queue_len("ops/q"))
    step("queue_pop non-blocking on missing queue",
         lambda: store.queue_pop("ops/q", block=False))
    step("queue_push first", lambda: store.queue_push("ops/q", "first"))
    step("queue_push second", lambda: store.queue_push("ops/q", "second"))
    step("queue_len 2", lambda: store.queue_len("ops/q"))
    step("check non-empty queue", lambda: store.check(["ops/q"]))
    step("queue_pop first", lambda: store.queue_pop("ops/q"))
    step("queue_pop second non-blocking", lambda: store.queue_pop("ops/q", block=False))
    step("queue_len 0", lambda: store.queue_len("ops/q"))
    step("queue_pop non-blocking on empty queue",
         lambda: store.queue_pop("ops/q", block=False))
    step("get n after failed queue_pop", lambda: store.get("ops/n"))

    step("list_keys", lambda: sorted(store.list_keys()))

    step("barrier world_size 1", lambda: store.barrier("ops/barrier", 1))
    step("get barrier counter", lambda: store.get("ops/barrier"))
    step("barrier world_size 2 alone times out",
         lambda: store.barrier("ops/barrier2", 2, short))
    step("get n after timed-out barrier", lambda: store.get("ops/n"))
    step("num_keys at end", lambda: store.num_keys())
    return results


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    store = dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                          timeout=timedelta(seconds=10))
    json.dump(run_script(store), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
