"""Spare processes join a running job: ranks 0..3 (RANK) make a
communicator of 4 on OCCL_TEST_ID, then grow it by the other processes of
the job (WORLD_SIZE - 4 joiners) on OCCL_TEST_GROW_ID; those processes are
the spares and join. Every rank of the grown communicator then checks
AllReduce, AllGather, AllToAll, Broadcast and Barrier against values
computed here, and the members check their old communicator still works.
Each process prints "rank R: ok" with its rank in the grown communicator.

With --topology MEMBERS_SPEC GROWN_SPEC (such as hosts=2x2 hosts=3x2) the
members' communicator has the first topology, which cannot grow without the
grown one (OcclError occlInvalidArgument), and the grown communicator the
second (given to grow and join); every rank checks that its topology has
one rank per rank, R ranks per host as the spec HxR says.
"""

import argparse
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


def check_topology(comm, spec):
    """comm's topology has comm.size ranks, per_host to a host as the spec
    hosts=HxR says."""
    if spec is None:
        return
    per_host = int(spec.split("x")[1].split(",")[0])
    t = comm.topology()
    hosts = [r["host"] for r in t["ranks"]]
    assert len(hosts) == comm.size, ("topology ranks", comm.rank, len(hosts), comm.size)
    assert hosts == [q // per_host for q in range(comm.size)], ("topology hosts", comm.rank, hosts)
    assert len(t["hosts"]) == comm.size // per_host, ("topology hosts", comm.rank, len(t["hosts"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", nargs=2, metavar=("MEMBERS_SPEC", "GROWN_SPEC"))
    args = ap.parse_args()
    member_topo, grown_topo = args.topology or (None, None)
    rank = int(os.environ["RANK"])
    njoin = int(os.environ["WORLD_SIZE"]) - MEMBERS
    grow_id = os.environ["OCCL_TEST_GROW_ID"]
    if rank >= MEMBERS:
        with occl.Communicator.join(grow_id, topology=grown_topo) as grown:
            assert grown.size == MEMBERS + njoin and MEMBERS <= grown.rank < grown.size, (grown.size, grown.rank)
            check_topology(grown, grown_topo)
            check(grown)
            print("rank %d: ok" % grown.rank, flush=True)
        return
    with occl.Communicator.init_rank(MEMBERS, os.environ["OCCL_TEST_ID"], rank, topology=member_topo) as old:
        check_topology(old, member_topo)
        if grown_topo is not None:
            try:
                old.grow(grow_id, njoin).destroy()
                raise AssertionError("a communicator with a topology grew without the grown one")
            except occl.OcclError as e:
                assert e.name == "occlInvalidArgument", e
        with old.grow(grow_id, njoin, topology=grown_topo) as grown:
            assert grown.size == MEMBERS + njoin and grown.rank == rank, (grown.size, grown.rank)
            check_topology(grown, grown_topo)
            check(grown)
        check(old)
        print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
