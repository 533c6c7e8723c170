"""A training script written for AWS's hyperpodrun, as its documentation
shows them, and nothing of elasticrun: hyperpod_elastic_agent's
elastic_event_detected() checked once per step; on True a DCP checkpoint
of the model and the step, and a clean return; at start, a checkpoint
loaded if there is one. Run with HYPERPOD_SIGNAL_COORDINATION=distributed.

  hyperpod_style_train.py CKPT_DIR LOG STEPS

Appends one JSON line per step, save and finish to LOG.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from hyperpod_elastic_agent.elastic_event_handler import elastic_event_detected


def log(path: str, **fields) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    finally:
        os.close(fd)


def main() -> int:
    ckpt, log_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    if os.path.exists(os.path.join(ckpt, ".metadata")):
        dcp.load(state, checkpoint_id=ckpt)
        model.load_state_dict(state["model"])
    start = int(state["step"])
    for step in range(start, steps):
        x = torch.ones(8, 4) * (step + 1)
        model.zero_grad()
        model(x).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.data -= 1e-3 * p.grad / world
        log(log_path, event="step", rank=rank, world=world, step=step)
        time.sleep(0.05)
        if elastic_event_detected():
            dcp.save({"model": model.state_dict(), "step": torch.tensor(step + 1)},
                     checkpoint_id=ckpt)
            log(log_path, event="saved", rank=rank, world=world, step=step + 1)
            dist.destroy_process_group()
            return 0
    log(log_path, event="done", rank=rank, world=world, step=steps)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
