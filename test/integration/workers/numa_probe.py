"""Records the CPUs a worker may run on, for the --numa-binding tests.

Writes $NUMA_PROBE_DIR/rank<LOCAL_RANK>.json: the Cpus_allowed_list of the
process and of a thread it starts, and whether torch was imported before
the script ran (a warm interpreter). NUMA_PROBE_TORCH=1 also imports torch
and records torch.get_num_threads(), which OpenMP sizes by the CPUs the
process could use when torch was loaded.
"""

import json
import os
import sys
import threading

torch_imported = "torch" in sys.modules


def cpus_allowed_list(status_path: str) -> str:
    with open(status_path) as f:
        return next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list:"))


thread_cpus = []
t = threading.Thread(target=lambda: thread_cpus.append(cpus_allowed_list("/proc/thread-self/status")))
t.start()
t.join()

record = {
    "cpus": cpus_allowed_list("/proc/self/status"),
    "thread_cpus": thread_cpus[0],
    "torch_imported": torch_imported,
}
if os.environ.get("NUMA_PROBE_TORCH") == "1":
    import torch

    record["torch_threads"] = torch.get_num_threads()
path = os.path.join(os.environ["NUMA_PROBE_DIR"], f"rank{os.environ['LOCAL_RANK']}.json")
with open(path, "w") as f:
    json.dump(record, f)
