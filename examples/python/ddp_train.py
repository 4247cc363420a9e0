#!/usr/bin/env python3
"""Data-parallel training of a small MLP with torch's DistributedDataParallel,
on the occl backend or on Gloo: the same script, only the backend's name
differs.

    torchrun --nproc_per_node 4 ddp_train.py --backend occl --out occl.json
    torchrun --nproc_per_node 4 ddp_train.py --backend gloo --out gloo.json
    python3 ddp_train.py --backend local --out local.json   # one process, whole batch

Everything is deterministic: the dataset, the initial weights (drawn with a
different seed on every rank; DDP broadcasts rank 0's), and the order of the
global batches. Each rank computes the gradient of its shard of the global
batch and DDP averages the gradients, so every backend trains the same model
up to the rounding of the reduction. Rank 0 writes the final weights and the
loss curve as JSON to --out.
"""

import argparse
import json
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["occl", "gloo", "local"], default="occl")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the final weights here (rank 0)")
    return ap.parse_args()


def dataset(n, dtype):
    """A deterministic regression problem: y = sin(x . w) + 0.1 |x|^2 / d."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, 16, generator=g, dtype=torch.float64)
    w = torch.randn(16, generator=g, dtype=torch.float64)
    y = torch.sin(x @ w) + 0.1 * (x * x).sum(1) / 16
    return x.to(dtype), y.unsqueeze(1).to(dtype)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    if args.backend == "occl":
        import occl.torch  # registers the backend "occl"
    if args.backend != "local":
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    if args.global_batch % world:
        sys.exit("--global-batch %d is not a multiple of %d ranks" % (args.global_batch, world))
    local = args.global_batch // world

    x, y = dataset(args.samples, dtype)
    torch.manual_seed(args.seed + (rank if world > 1 else 0))
    if world == 1:
        torch.manual_seed(args.seed)  # rank 0's weights, which DDP gives every rank
    net = torch.nn.Sequential(torch.nn.Linear(16, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1)).to(dtype)
    model = DistributedDataParallel(net) if world > 1 else net
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    order = torch.Generator().manual_seed(99)
    losses = []
    perm = torch.randperm(args.samples, generator=order)
    pos = 0
    for _ in range(args.steps):
        if pos + args.global_batch > args.samples:
            perm, pos = torch.randperm(args.samples, generator=order), 0
        batch = perm[pos : pos + args.global_batch]
        pos += args.global_batch
        mine = batch[rank * local : (rank + 1) * local]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        loss.backward()  # DDP averages the gradients across ranks here
        opt.step()
        l = loss.detach().reshape(1).clone()
        if world > 1:
            dist.all_reduce(l)
        losses.append(float(l[0]) / world)

    weights = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).to(torch.float64).tolist()
    if rank == 0:
        print("%s: %d ranks, %d steps, loss %.6f -> %.6f" % (args.backend, world, args.steps, losses[0], losses[-1]))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"backend": args.backend, "world": world, "steps": args.steps, "dtype": args.dtype,
                           "losses": losses, "weights": weights}, f)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
