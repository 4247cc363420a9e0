#!/usr/bin/env python3
"""Data-parallel training of a small MLP, gradients averaged across processes
by occl (through occl.py and liboccl.so) or by torch.distributed's gloo
backend, so the two can be compared on the same job.

    # occl: under occl's launcher (OCCL_RANK, OCCL_WORLD_SIZE, OCCL_UNIQUE_ID),
    # torchrun, mpirun or srun
    python3 ddp_train.py --backend occl --out occl.json
    # gloo: under torchrun, or with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    python3 ddp_train.py --backend gloo --out gloo.json
    # one process over the whole global batch, the reference
    python3 ddp_train.py --backend local --out local.json

Everything is deterministic: the dataset, the initial weights (drawn with a
fixed seed on every rank, then broadcast from rank 0 as DDP does) and the
order of the global batches. Each rank computes the gradient of its shard of
the global batch; the averaged gradient is the full batch's, so every
backend trains the same model up to the rounding of the reduction.
Gradients are flattened into one contiguous bucket per step and averaged in
place, without copies between torch and occl. Rank 0 writes the final
weights (and the loss curve) as JSON to --out.
"""

import argparse
import json
import os
import sys

import torch


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


class Backend:
    """The few collectives training needs, on occl, gloo or a single process."""

    def __init__(self, name):
        self.name = name
        if name == "occl":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import occl

            self.comm = occl.Communicator.init_from_env()
            self.rank, self.world = self.comm.rank, self.comm.size
        elif name == "gloo":
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method="env://")
            self.dist = dist
            self.rank, self.world = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.world = 0, 1

    def average(self, t):
        """Averages t across ranks, in place."""
        if self.name == "occl":
            self.comm.all_reduce(t, op="avg")
        elif self.name == "gloo":
            self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)  # gloo has no AVG
            t.div_(self.world)
        return t

    def broadcast(self, t, root=0):
        if self.name == "occl":
            self.comm.broadcast(t, root)
        elif self.name == "gloo":
            self.dist.broadcast(t, root)
        return t

    def close(self):
        if self.name == "occl":
            self.comm.destroy()
        elif self.name == "gloo":
            self.dist.destroy_process_group()


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
    be = Backend(args.backend)
    if args.global_batch % be.world:
        sys.exit("--global-batch %d is not a multiple of %d ranks" % (args.global_batch, be.world))
    local = args.global_batch // be.world

    x, y = dataset(args.samples, dtype)
    torch.manual_seed(args.seed + be.rank)  # different on every rank: the broadcast makes them equal
    model = torch.nn.Sequential(
        torch.nn.Linear(16, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1)
    ).to(dtype)
    params = list(model.parameters())
    with torch.no_grad():
        for p in params:
            be.broadcast(p.data, 0)

    # One contiguous gradient bucket, reduced in place every step.
    numel = sum(p.numel() for p in params)
    bucket = torch.zeros(numel, dtype=dtype)
    order = torch.Generator().manual_seed(99)
    losses = []
    perm = torch.randperm(args.samples, generator=order)
    pos = 0
    for step in range(args.steps):
        if pos + args.global_batch > args.samples:
            perm, pos = torch.randperm(args.samples, generator=order), 0
        batch = perm[pos : pos + args.global_batch]
        pos += args.global_batch
        mine = batch[be.rank * local : (be.rank + 1) * local]

        model.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
        loss.backward()
        with torch.no_grad():
            off = 0
            for p in params:
                bucket[off : off + p.numel()].copy_(p.grad.reshape(-1))
                off += p.numel()
            be.average(bucket)
            off = 0
            for p in params:
                p.add_(bucket[off : off + p.numel()].view_as(p), alpha=-args.lr)
                off += p.numel()
            l = loss.detach().reshape(1).clone()
            losses.append(float(be.average(l)[0]))

    weights = torch.cat([p.detach().reshape(-1) for p in params]).to(torch.float64).tolist()
    if be.rank == 0:
        print("%s: %d ranks, %d steps, loss %.6f -> %.6f" % (args.backend, be.world, args.steps, losses[0], losses[-1]))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"backend": args.backend, "world": be.world, "steps": args.steps,
                           "dtype": args.dtype, "losses": losses, "weights": weights}, f)
    be.close()


if __name__ == "__main__":
    main()
