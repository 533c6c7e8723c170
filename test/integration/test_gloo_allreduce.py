"""Real PyTorch gloo jobs rendezvous through `elasticctl store`.

Workers run as an elastic agent would start them: TORCHELASTIC_USE_AGENT_STORE
says the store is already served at MASTER_ADDR:MASTER_PORT, so every rank,
rank 0 included, is only a client of our server.
"""

import sys

import pytest

from conftest import WORKERS, venv_env

WORLD_SIZE = 4
JOB_TIMEOUT_S = 240  # bounds a hang of the whole job; not a performance claim


def run_job(procs, store, job, extra_env):
    workers = []
    for rank in range(WORLD_SIZE):
        env = venv_env(
            MASTER_ADDR=store.host,
            MASTER_PORT=str(store.port),
            TORCHELASTIC_USE_AGENT_STORE="True",
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(WORLD_SIZE),
            LOCAL_WORLD_SIZE=str(WORLD_SIZE),
            GROUP_RANK="0",
            **extra_env,
        )
        workers.append(
            procs.spawn([sys.executable, WORKERS / "gloo_allreduce.py"], f"{job}-rank{rank}", env=env)
        )
    failed = []
    try:
        for w in workers:
            rc = w.wait(JOB_TIMEOUT_S)
            if rc != 0:
                failed.append(w)
                # The others would wait for the dead rank until their own
                # timeout; no point waiting for them.
                break
    finally:
        if failed or any(w.popen.poll() is None for w in workers):
            for w in workers:
                w.kill_group()
    if failed:
        store_state = (
            "the store is still running"
            if store.proc.popen.poll() is None
            else "the store had exited:\n" + store.proc.describe()
        )
        pytest.fail("\n".join(w.describe() for w in failed) + "\n" + store_state)
    for rank, w in enumerate(workers):
        assert f"rank {rank}: ok sum={WORLD_SIZE * (WORLD_SIZE + 1) // 2}" in w.stdout()


def test_four_gloo_ranks_all_reduce_through_our_store_and_a_second_job_reuses_it(
    procs, our_store
):
    run_job(procs, our_store, "job0", {"TORCHELASTIC_RESTART_COUNT": "0"})
    # Same server, a new job: the store must keep serving after a whole job's
    # clients have come and gone. PyTorch 2.x does not prefix keys per
    # TORCHELASTIC_RESTART_COUNT in agent-store mode (it expects a fresh store
    # per attempt), so without its own namespace the second job would read the
    # first one's gloo addresses and fail with "connection refused".
    run_job(procs, our_store, "job1", {"TORCHELASTIC_RESTART_COUNT": "1", "JOB_PREFIX": "job1"})
    assert our_store.proc.popen.poll() is None, "store died during the jobs"
