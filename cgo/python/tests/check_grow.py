"""A spare process joins a running job: ranks 0..3 (RANK) make a
communicator of 4 on OCCL_TEST_ID, then grow it by one joiner on
OCCL_TEST_GROW_ID; the process of RANK 4 is the spare and joins. Every rank
of the 5 then checks AllReduce, AllGather, AllToAll, Broadcast and Barrier
against values computed here, and the members check their old communicator
still works. Each process prints "rank R: ok" with its rank in the grown
communicator.
"""

import os

import numpy as np

import occl

MEMBERS = 4


def check(comm):
    n, r = comm.size, comm.rank
    x = np.arange(8, dtype=np.float32) + 100 * r
    comm.all_reduce(x)
    want = np.arange(8, dtype=np.float32) * n + 100 * sum(range(n))
    assert np.array_equal(x, want), ("all_reduce", r, x, want)

    mine = np.array([7 * r + 1, 7 * r + 2], dtype=np.int64)
    out = np.zeros(2 * n, dtype=np.int64)
    comm.all_gather(mine, out)
    want = np.array([7 * q + k for q in range(n) for k in (1, 2)], dtype=np.int64)
    assert np.array_equal(out, want), ("all_gather", r, out, want)

    # Block j of rank i's buffer holds 1000*i + j.
    send = np.array([1000 * r + j for j in range(n)], dtype=np.int32)
    recv = np.zeros(n, dtype=np.int32)
    comm.all_to_all(send, recv)
    want = np.array([1000 * i + r for i in range(n)], dtype=np.int32)
    assert np.array_equal(recv, want), ("all_to_all", r, recv, want)

    for root in range(n):
        b = np.full(5, root + 0.5 if r == root else -1.0, dtype=np.float64)
        comm.broadcast(b, root=root)
        assert np.all(b == root + 0.5), ("broadcast", r, root, b)
    comm.barrier()


def main():
    rank = int(os.environ["RANK"])
    grow_id = os.environ["OCCL_TEST_GROW_ID"]
    if rank >= MEMBERS:
        with occl.Communicator.join(grow_id) as grown:
            assert grown.size == MEMBERS + 1 and grown.rank == MEMBERS, (grown.size, grown.rank)
            check(grown)
            print("rank %d: ok" % grown.rank, flush=True)
        return
    with occl.Communicator.init_rank(MEMBERS, os.environ["OCCL_TEST_ID"], rank) as old:
        with old.grow(grow_id, 1) as grown:
            assert grown.size == MEMBERS + 1 and grown.rank == rank, (grown.size, grown.rank)
            check(grown)
        check(old)
        print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
