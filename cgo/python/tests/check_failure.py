"""A failing rank under the occl backend: every other rank gets a
RuntimeError naming it, never a hang.

    --mode kill:    rank VICTIM exits in the middle of the job; the others
                    are in an all_reduce that cannot complete.
    --mode timeout: rank VICTIM is alive but does not join an all_reduce;
                    the others give up after the group's timeout.
Each surviving rank prints "rank R: raised: <message>".
"""

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist

import occl.torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["kill", "timeout"], required=True)
    p.add_argument("--victim", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60)
    a = p.parse_args()
    dist.init_process_group("occl", timeout=datetime.timedelta(seconds=a.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    # The store (served by rank 0) outlives the group.
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == a.victim:
        if a.mode == "kill":
            os._exit(17)
        # Alive, holding everyone up, until every other rank has raised
        # (or rank 0, which serves the store, has gone), for 3 timeouts
        # at most.
        store.set_timeout(datetime.timedelta(seconds=a.timeout * 3))
        try:
            store.wait(["check_failure/raised/%d" % r for r in range(n) if r != rank])
        except Exception:
            pass
        os._exit(0)
    start = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(t)
    except RuntimeError as e:
        print("rank %d: raised after %.1fs: %s" % (rank, time.monotonic() - start, e), flush=True)
        # The group has failed: later operations fail at once, too.
        try:
            dist.all_reduce(t)
        except RuntimeError as e2:
            print("rank %d: later operation raised: %s" % (rank, e2), flush=True)
        try:
            store.set("check_failure/raised/%d" % rank, "1")
            if rank == 0:
                # Serve the store until every other rank has raised.
                store.wait(["check_failure/raised/%d" % r for r in range(n) if r != a.victim])
        except Exception:
            pass
        os._exit(0)
    print("rank %d: no error" % rank, flush=True)
    os._exit(1)


if __name__ == "__main__":
    main()
