"""Shrink from Python: rank VICTIM exits in the middle of the job; the
others see the all_reduce raise, shrink without it and reduce on the new
communicator. Each surviving rank prints "rank R: ok" (R its old rank).
"""

import argparse
import os

import numpy as np

import occl


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--victim", type=int, default=2)
    a = p.parse_args()
    c = occl.Communicator.init_from_env()
    rank, size = c.rank, c.size
    x = np.ones(1 << 12, dtype=np.float32)
    c.all_reduce(x)
    if rank == a.victim:
        os._exit(17)
    try:
        for _ in range(1000):
            c.all_reduce(x)
        print("rank %d: no error" % rank, flush=True)
        os._exit(1)
    except occl.OcclError as e:
        print("rank %d: raised: %s" % (rank, e), flush=True)
    nc = c.shrink()
    c.destroy()
    survivors = [r for r in range(size) if r != a.victim]
    assert nc.size == len(survivors) and nc.rank == survivors.index(rank), (nc.rank, nc.size)
    y = np.array([rank, 1], dtype=np.int64)
    nc.all_reduce(y)
    assert y.tolist() == [sum(survivors), len(survivors)], y
    nc.destroy()
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
