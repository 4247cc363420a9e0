"""In-place recovery under the occl backend: rank VICTIM is killed with
SIGKILL in the middle of an all_reduce; every other rank gets a
RuntimeError naming it, calls occl.torch.shrink and checks all_reduce,
all_to_all_single with uneven split sizes, broadcast, send and recv on
the group of the survivors against values computed here. Each surviving rank prints
"rank R: raised: <message>" and "rank R: ok" (R its rank in the world
group).
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist

import occl.torch


def value(src, dst, k):
    """Element k of the block rank src sends rank dst (new group ranks)."""
    return src * 10000 + dst * 100 + k


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--victim", type=int, default=2)
    a = p.parse_args()
    dist.init_process_group("occl")
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1 << 20)
    dist.all_reduce(t)
    assert t[0].item() == size
    if rank == a.victim:
        # Dies with its part of an all_reduce in flight.
        dist.all_reduce(t, async_op=True)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            dist.all_reduce(t)
        print("rank %d: no error" % rank, flush=True)
        os._exit(1)
    except RuntimeError as e:
        print("rank %d: raised: %s" % (rank, e), flush=True)

    pg = occl.torch.shrink()
    survivors = [r for r in range(size) if r != a.victim]
    n, me = len(survivors), survivors.index(rank)
    assert (pg.size(), pg.rank()) == (n, me), (pg.size(), pg.rank())
    assert dist.get_world_size(pg) == n

    # all_reduce through torch.distributed.
    x = torch.arange(1000, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(x, group=pg)
    want = torch.arange(1000, dtype=torch.float64) * sum(r + 1 for r in survivors)
    assert torch.equal(x, want), (x[:4], want[:4])
    m = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=pg)
    assert m.item() == max(survivors), m

    # all_to_all_single with uneven split sizes: rank i sends i+j+1 rows
    # of 2 to rank j.
    send = [i + me + 1 for i in range(n)]
    recv = [me + i + 1 for i in range(n)]
    inp = torch.tensor([[value(me, j, k), -value(me, j, k)] for j in range(n) for k in range(send[j])],
                       dtype=torch.int64)
    out = torch.empty((sum(recv), 2), dtype=torch.int64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send, group=pg)
    want = torch.tensor([[value(i, me, k), -value(i, me, k)] for i in range(n) for k in range(recv[i])],
                        dtype=torch.int64)
    assert torch.equal(out, want), (out, want)

    # broadcast from the new group's last rank, through the group (torch
    # 1.13 cannot translate src for an unregistered group).
    root = n - 1
    g = torch.Generator().manual_seed(7)
    want = torch.randn(4096, generator=g)
    b = want.clone() if me == root else torch.zeros(4096)
    pg.broadcast(b, root).wait()
    assert torch.equal(b, want)
    try:
        dist.broadcast(b, src=survivors[root], group=pg)
        raise AssertionError("torch translated src for an unregistered group")
    except RuntimeError as e:
        assert "not registered" in str(e), e

    # send and recv, through the group too: new rank 0 to the last one.
    if me == 0:
        pg.send([torch.arange(10, dtype=torch.int32) * rank], n - 1, 0).wait()
    elif me == n - 1:
        r = torch.zeros(10, dtype=torch.int32)
        pg.recv([r], 0, 0).wait()
        assert torch.equal(r, torch.arange(10, dtype=torch.int32) * survivors[0]), r

    # A barrier, then the same reduction again: the group keeps working.
    dist.barrier(group=pg)
    y = torch.full((3,), float(rank))
    dist.all_reduce(y, group=pg)
    assert y.tolist() == [float(sum(survivors))] * 3, y
    print("rank %d: ok" % rank, flush=True)
    del pg  # frees the shrunk communicator; the world group frees the failed one at exit


if __name__ == "__main__":
    main()
