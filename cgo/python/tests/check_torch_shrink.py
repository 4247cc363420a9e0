"""In-place recovery under the occl backend: rank VICTIM of a world of 4
is killed with SIGKILL in the middle of an all_reduce; every other rank
gets a RuntimeError naming it, calls occl.torch.shrink and checks
all_reduce, all_to_all_single with uneven split sizes, broadcast, send and
recv and barrier on the group of the survivors against values computed
here. With --spare, a fifth process (RANK 4) is a spare: it waits for the
grow id the survivors' rank 0 writes to $TMPDIR, joins (occl.torch.join)
the group they grow (occl.torch.grow) and all 4 check the same operations
on it. Each surviving rank prints "rank R: raised: <message>", and each
process "rank R: ok" (R its RANK).
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist

import occl.torch

WORLD = 4


def value(src, dst, k):
    """Element k of the block rank src sends rank dst (group ranks)."""
    return src * 10000 + dst * 100 + k


def check(pg, ids, me_id):
    """Checks pg, whose rank i is the process with RANK ids[i]."""
    n, me = len(ids), ids.index(me_id)
    assert (pg.size(), pg.rank()) == (n, me), (pg.size(), pg.rank())
    assert dist.get_world_size(pg) == n

    # all_reduce through torch.distributed.
    x = torch.arange(1000, dtype=torch.float64) * (me_id + 1)
    dist.all_reduce(x, group=pg)
    want = torch.arange(1000, dtype=torch.float64) * sum(r + 1 for r in ids)
    assert torch.equal(x, want), (x[:4], want[:4])
    m = torch.tensor([me_id], dtype=torch.int64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=pg)
    assert m.item() == max(ids), m

    # all_to_all_single with uneven split sizes: rank i sends i+j+1 rows
    # of 2 to rank j.
    send = [me + j + 1 for j in range(n)]
    recv = [i + me + 1 for i in range(n)]
    inp = torch.tensor([[value(me, j, k), -value(me, j, k)] for j in range(n) for k in range(send[j])],
                       dtype=torch.int64)
    out = torch.empty((sum(recv), 2), dtype=torch.int64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send, group=pg)
    want = torch.tensor([[value(i, me, k), -value(i, me, k)] for i in range(n) for k in range(recv[i])],
                        dtype=torch.int64)
    assert torch.equal(out, want), (out, want)

    # broadcast from the group's last rank, through the group (torch 1.13
    # cannot translate src for an unregistered group).
    root = n - 1
    want = torch.randn(4096, generator=torch.Generator().manual_seed(7))
    b = want.clone() if me == root else torch.zeros(4096)
    pg.broadcast(b, root).wait()
    assert torch.equal(b, want)
    try:
        dist.broadcast(b, src=ids[root], group=pg)
        raise AssertionError("torch translated src for an unregistered group")
    except RuntimeError as e:
        assert "not registered" in str(e), e

    # send and recv, through the group too: rank 0 to the last one.
    if me == 0:
        pg.send([torch.arange(10, dtype=torch.int32) * me_id], n - 1, 0).wait()
    elif me == n - 1:
        r = torch.zeros(10, dtype=torch.int32)
        pg.recv([r], 0, 0).wait()
        assert torch.equal(r, torch.arange(10, dtype=torch.int32) * ids[0]), r

    # A barrier, then the same reduction again: the group keeps working.
    dist.barrier(group=pg)
    y = torch.full((3,), float(me_id))
    dist.all_reduce(y, group=pg)
    assert y.tolist() == [float(sum(ids))] * 3, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--victim", type=int, default=2)
    p.add_argument("--spare", action="store_true")
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    survivors = [r for r in range(WORLD) if r != a.victim]
    id_file = os.path.join(os.environ["TMPDIR"], "grow-id")
    if rank == WORLD:  # the spare: no init_process_group
        deadline = time.monotonic() + 60
        while not os.path.exists(id_file) and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(id_file) as f:
            grown = occl.torch.join(f.read())
        check(grown, survivors + [WORLD], rank)
        print("rank %d: ok" % rank, flush=True)
        return

    dist.init_process_group("occl", world_size=WORLD, rank=rank)
    t = torch.ones(1 << 20)
    dist.all_reduce(t)
    assert t[0].item() == WORLD
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
    check(pg, survivors, rank)
    if a.spare:
        if pg.rank() == 0:
            with open(id_file + ".tmp", "w") as f:
                f.write(str(occl.get_unique_id()))
            os.rename(id_file + ".tmp", id_file)
        dist.barrier(group=pg)
        with open(id_file) as f:
            grown = occl.torch.grow(f.read(), 1, group=pg)
        check(grown, survivors + [WORLD], rank)
        check(pg, survivors, rank)  # the shrunk group still works
        del grown
    del pg  # frees the shrunk communicator; the world group frees the failed one at exit
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
