"""A plain PyTorch worker: env:// rendezvous, one all_reduce, checked."""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    assert t.item() == expected, f"rank {rank}: all_reduce gave {t.item()}, expected {expected}"
    print(f"[worker {rank}/{world}] all_reduce(rank+1) = {t.item():.0f} (pid {os.getpid()})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
