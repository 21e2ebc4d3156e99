"""Run by test_braid.py under `python -m torch.distributed.run` (torchrun), unchanged from
what a user writes: the backend name is the only braid-specific part."""

import os

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401  registers "braid"

dist.init_process_group("braid")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == world * (world + 1) / 2), t[:4]
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
torch.manual_seed(rank)
model(torch.randn(16, 8)).sum().backward()
g = model.module.weight.grad.clone()
dist.broadcast(g, 0)
assert torch.equal(g, model.module.weight.grad), "DDP left different gradients on the ranks"
print(f"torchrun ok rank {rank} of {world} local_rank {os.environ['LOCAL_RANK']}", flush=True)
dist.destroy_process_group()
