#!/usr/bin/env python3
"""How long one DistributedDataParallel training step takes: forward, backward
(whose gradient buckets DDP all-reduces as they fill, while the backward pass
goes on) and the optimizer's step, for a stack of Linear layers. Rank 0
prints the median and 90th percentile of the timed steps and the number of
buckets.

Run it under torchrun with the Python that has the occl package installed
(see cgo/python), from the repository root:

    OMP_NUM_THREADS=1 venv/bin/python -m torch.distributed.run --redirects 1 --tee 1 \\
        --nproc_per_node 2 bench/peers/ddp_step.py --width 32 --layers 32 --bucket-mb 0.004

--bucket-mb sets every bucket's size, the first one's too (DDP otherwise
makes its first bucket 1 MiB): small buckets give many all-reduces per
step, each overlapping the backward pass of the layers before it.
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="occl", choices=("occl", "gloo"))
    p.add_argument("--width", type=int, default=32, help="features of every layer")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--batch", type=int, default=8, help="samples per rank and step")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (the first bucket's too)")
    p.add_argument("--steps", type=int, default=300, help="timed steps")
    p.add_argument("--warmup", type=int, default=50)
    args = p.parse_args()
    if args.backend == "occl":
        import occl.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)])
    # DDP caps its first bucket at this module constant, not at bucket_cap_mb.
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * (1 << 20))
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width)
    clock = time.perf_counter
    times = []
    for i in range(args.warmup + args.steps):
        a = clock()
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()
        if i >= args.warmup:
            times.append((clock() - a) * 1e6)
    times.sort()
    k = len(times)
    buckets = len(ddp.reducer._get_zeros_like_grad_buckets())
    if dist.get_rank() == 0:
        print("%s np %d width %d layers %d bucket %g MB (%d buckets): step p50 %.1f us p90 %.1f us"
              % (args.backend, dist.get_world_size(), args.width, args.layers, args.bucket_mb, buckets,
                 times[k // 2], times[k * 9 // 10]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
