"""Shows elasticrun's store serving PyTorch.

Starts `elasticctl store` on a free port, talks to it with PyTorch's own
TCPStore client, then runs four gloo workers that rendezvous through it the
way workers under an elasticrun agent do (TORCHELASTIC_USE_AGENT_STORE=True)
and all-reduce a tensor; finally launches the same workers with
`elasticrun --standalone`. Run through scripts/demo.sh.
"""

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import time

WORLD_SIZE = 4
HERE = os.path.dirname(os.path.abspath(__file__))


def start_store(elasticctl):
    proc = subprocess.Popen(
        [elasticctl, "store", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on (\S+):(\d+)", line)
    if not m:
        proc.kill()
        sys.exit(f"demo: elasticctl store did not start (printed {line!r})")
    return proc, int(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--elasticctl", default="build/release/elasticctl")
    ap.add_argument("--elasticrun", default="build/release/elasticrun",
                    help="also launch the workers with elasticrun ('' to skip)")
    args = ap.parse_args()

    import torch.distributed as dist

    store_proc, port = start_store(args.elasticctl)
    print(f"[demo] elasticctl store (pid {store_proc.pid}) listening on 127.0.0.1:{port}")
    try:
        client = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                               timeout=datetime.timedelta(seconds=10))
        client.set("greeting", "hello from torch.distributed.TCPStore")
        print(f"[demo] torch client: set/get -> {client.get('greeting').decode()!r}")
        print(f"[demo] torch client: add('counter', 5) twice -> {client.add('counter', 5)}, "
              f"{client.add('counter', 5)}")
        print(f"[demo] torch client: compare_set('greeting', ..) -> "
              f"{client.compare_set('greeting', 'hello from torch.distributed.TCPStore', 'bye').decode()!r}")

        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   WORLD_SIZE=str(WORLD_SIZE), TORCHELASTIC_USE_AGENT_STORE="True",
                   OMP_NUM_THREADS="1")
        start = time.monotonic()
        workers = []
        for rank in range(WORLD_SIZE):
            wenv = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
            workers.append(subprocess.Popen(
                [sys.executable, "-u", os.path.join(HERE, "allreduce_worker.py")], env=wenv))
        codes = [w.wait(timeout=120) for w in workers]
        elapsed = time.monotonic() - start
        ok = all(c == 0 for c in codes)
        print(f"[demo] {WORLD_SIZE} gloo workers rendezvoused through the store and all-reduced "
              f"in {elapsed:.1f}s: {'OK' if ok else f'FAILED (exit codes {codes})'}")
        print(f"[demo] keys in the store now: {client.num_keys()}")

        if args.elasticrun:
            # The same workers, launched the torchrun way: the agent hosts the
            # store itself and gives each worker torchrun's environment.
            start = time.monotonic()
            code_er = subprocess.call(
                [args.elasticrun, "--standalone", "--nproc-per-node", str(WORLD_SIZE),
                 "--tee", "3", os.path.join(HERE, "allreduce_worker.py")],
                env=dict(os.environ, ELASTICRUN_LOG_LEVEL="warn"))
            print(f"[demo] elasticrun --standalone --nproc-per-node {WORLD_SIZE}: "
                  f"{'OK' if code_er == 0 else f'FAILED (exit {code_er})'} "
                  f"in {time.monotonic() - start:.1f}s")
            ok = ok and code_er == 0
    finally:
        store_proc.send_signal(signal.SIGTERM)
        code = store_proc.wait(timeout=10)
        print(f"[demo] SIGTERM -> elasticctl store exited with code {code}")
    sys.exit(0 if ok and code == 0 else 1)


if __name__ == "__main__":
    main()
