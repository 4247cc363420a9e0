#!/usr/bin/env python3
"""How long a blocking torch.distributed call takes when the program
computes between calls, as a training step does: each rank busy-waits a
given time (its "think" time, Python spinning on time.perf_counter), then
makes one call, and the call's time is recorded. Rank 0 prints, per think
time, the median, 90th and 99th percentile and the largest call time and
the share of calls over 20 us.

Run it under torchrun with the Python that has the occl package installed
(see cgo/python), from the repository root:

    venv/bin/python -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 2 \\
        bench/peers/torch_think.py --think 0,60,200

A call's time includes waiting for the other ranks: a rank whose thread
was kept off its CPU during its think time arrives late, and the others
wait for it. So the tail says as much about what else runs on the ranks'
CPUs (the library's own threads among them) as about the call.

With --copy BYTES each rank also copies BYTES between two tensors before
every call (outside the timed call), as a large operation's data passes
through the caches: the call's code and data (Python's, torch's, the
backend's) are then fetched again. On one rank (--nproc_per_node 1) the
call time is the call path's alone, with no peer to wait for:

    OMP_NUM_THREADS=1 venv/bin/python -m torch.distributed.run --redirects 1 --tee 1 \\
        --nproc_per_node 1 bench/peers/torch_think.py --op all_reduce --bytes 8 --think 0 \\
        --copy 0,1048576

With --completion the call is issued with async_op=True and its end is
awaited another way (the time is still from the call to its end):

    call     the blocking call (the default);
    wait     the work's wait();
    future   the work's get_future().wait(): DistributedDataParallel's
             reducer waits for each bucket's all_reduce through its future;
    then     get_future().then(fn).wait(), fn returning the result's first
             tensor, as torch's allreduce_hook (ddp_comm_hooks) does.

A future is completed, and its callbacks run, by a thread of the backend's
own, so "future" and "then" add that thread's wake-up to the call:

    venv/bin/python -m torch.distributed.run --redirects 1 --tee 1 --nproc_per_node 2 \\
        bench/peers/torch_think.py --op all_reduce --bytes 8 --think 0 --completion call,future,then
"""
import argparse
import time

import torch
import torch.distributed as dist


def first(fut):
    return fut.value()[0]


# How a call's end is awaited (--completion): each makes, from issue (which
# issues the operation, async_op as given), the call that is timed.
COMPLETIONS = {
    "call": lambda issue: lambda: issue(False),
    "wait": lambda issue: lambda: issue(True).wait(),
    "future": lambda issue: lambda: issue(True).get_future().wait(),
    "then": lambda issue: lambda: issue(True).get_future().then(first).wait(),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="occl", choices=("occl", "gloo"))
    p.add_argument("--op", default="all_to_all_single", choices=("all_to_all_single", "all_reduce"))
    p.add_argument("--bytes", type=int, default=32, help="bytes per rank (float32 elements x 4)")
    p.add_argument("--think", default="0,60", help="comma-separated think times, microseconds")
    p.add_argument("--copy", default="0", help="comma-separated bytes each rank copies before every call")
    p.add_argument("--iters", type=int, default=20000, help="timed calls per think time and copy")
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--completion", default="call",
                   help="comma-separated: call, wait, future, then (see above)")
    args = p.parse_args()
    completions = args.completion.split(",")
    for c in completions:
        if c not in COMPLETIONS:
            p.error("--completion %s: want one of %s" % (c, ", ".join(COMPLETIONS)))
    if args.backend == "occl":
        import occl.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    n = max(1, args.bytes // 4)
    if args.op == "all_to_all_single":
        n = max(size, n - n % size)
        x = torch.ones(n, dtype=torch.float32)
        y = torch.empty_like(x)

        def issue(async_op):
            return dist.all_to_all_single(y, x, async_op=async_op)
    else:
        x = torch.ones(n, dtype=torch.float32)

        def issue(async_op):
            return dist.all_reduce(x, async_op=async_op)
    clock = time.perf_counter
    for completion, think, copy in ((m, float(t), int(c)) for m in completions for t in args.think.split(",")
                                    for c in args.copy.split(",")):
        call = COMPLETIONS[completion](issue)
        src, dst = torch.ones(max(1, copy // 4)), torch.empty(max(1, copy // 4))
        times = []
        for i in range(args.warmup + args.iters):
            if copy:
                dst.copy_(src)
            end = clock() + think * 1e-6
            while clock() < end:
                pass
            a = clock()
            call()
            b = clock()
            if i >= args.warmup:
                times.append((b - a) * 1e6)
        times.sort()
        k = len(times)
        if rank == 0:
            over = sum(1 for t in times if t > 20) / k
            print("%s %s %d B np %d %s think %4.0f us copy %d B: p50 %.1f p90 %.1f p99 %.1f max %.0f us, "
                  "over 20 us %.1f%%" % (args.backend, args.op, n * 4, size, completion, think, copy, times[k // 2],
                                         times[k * 9 // 10], times[k * 99 // 100], times[-1], over * 100), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
