"""Checks every torch.distributed operation on the occl backend against
references computed on each rank from what every rank contributes (no
collective is used to compute a reference).

Run it on 4 processes:
    torchrun --nproc_per_node 4 check_backend.py            # env://
    RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. python check_backend.py --init tcp
    RANK=.. WORLD_SIZE=.. python check_backend.py --init file --file /tmp/x
Each rank prints "rank R: ok" at the end; any failure raises.
"""

import argparse
import datetime
import gc
import os
import threading

import torch
import torch.distributed as dist

import occl
import occl.torch

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}


def vals(rank, n, dtype, hi=10, seed=0):
    """Rank's deterministic contribution: small integers, exact in every dtype."""
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + seed * 5) % hi).to(dtype)


def same(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        bad = (got.to(torch.float64) != want.to(torch.float64)).nonzero()
        raise AssertionError("%s: got %s, want %s (first differences at %s)" % (what, got.flatten()[:8].tolist(), want.flatten()[:8].tolist(), bad[:4].flatten().tolist()))


def reference(op, contribs, dtype):
    x = torch.stack([c.to(torch.float64) for c in contribs])
    if op == "sum":
        r = x.sum(0)
    elif op == "product":
        r = x.prod(0)
    elif op == "min":
        r = x.min(0).values
    elif op == "max":
        r = x.max(0).values
    else:
        r = x.sum(0) / len(contribs)
        if not dtype.is_floating_point:
            r = torch.trunc(r)
    return r.to(dtype)


def check_all_reduce(rank, n):
    for dtype in DTYPES:
        for name, op in OPS.items():
            for count in (1, 1000):
                hi = 2 if name == "product" else 10
                t = vals(rank, count, dtype, hi) + (1 if name == "product" else 0)
                contribs = [vals(r, count, dtype, hi) + (1 if name == "product" else 0) for r in range(n)]
                dist.all_reduce(t, op=op)
                same(t, reference(name, contribs, dtype), "all_reduce %s %s x%d" % (name, dtype, count))
    big = vals(rank, 1 << 18, torch.float32)
    dist.all_reduce(big)
    same(big, reference("sum", [vals(r, 1 << 18, torch.float32) for r in range(n)], torch.float32), "all_reduce 1 MiB")


def check_broadcast_reduce(rank, n):
    for dtype in DTYPES + [torch.bool]:
        for root in range(n):
            t = vals(rank, 333, torch.int64, seed=root).to(dtype) if dtype != torch.bool else (vals(rank, 333, torch.int64) % 2 == 0)
            want = vals(root, 333, torch.int64, seed=root).to(dtype) if dtype != torch.bool else (vals(root, 333, torch.int64) % 2 == 0)
            dist.broadcast(t, src=root)
            same(t, want, "broadcast %s from %d" % (dtype, root))
    for dtype in DTYPES:
        for name in ("sum", "max"):
            t = vals(rank, 100, dtype)
            dist.reduce(t, dst=1, op=OPS[name])
            if rank == 1:
                same(t, reference(name, [vals(r, 100, dtype) for r in range(n)], dtype), "reduce %s %s" % (name, dtype))


def check_gathers(rank, n):
    gather_base = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    scatter_base = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    for dtype in DTYPES:
        mine = vals(rank, 50, dtype)
        outs = [torch.empty(50, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, mine)
        for r in range(n):
            same(outs[r], vals(r, 50, dtype), "all_gather %s block %d" % (dtype, r))
        flat = torch.empty(n * 50, dtype=dtype)
        gather_base(flat, mine)
        same(flat, torch.cat([vals(r, 50, dtype) for r in range(n)]), "all_gather_into_tensor %s" % dtype)

        ins = [vals(rank, 40, dtype, seed=j) for j in range(n)]
        out = torch.empty(40, dtype=dtype)
        dist.reduce_scatter(out, ins)
        same(out, reference("sum", [vals(r, 40, dtype, seed=rank) for r in range(n)], dtype), "reduce_scatter %s" % dtype)
        out2 = torch.empty(40, dtype=dtype)
        scatter_base(out2, torch.cat(ins))
        same(out2, out, "reduce_scatter_tensor %s" % dtype)

        root = 2 % n
        g = [torch.empty(30, dtype=dtype) for _ in range(n)] if rank == root else None
        dist.gather(vals(rank, 30, dtype), gather_list=g, dst=root)
        if rank == root:
            for r in range(n):
                same(g[r], vals(r, 30, dtype), "gather %s block %d" % (dtype, r))
        s = [vals(root, 30, dtype, seed=j) for j in range(n)] if rank == root else None
        got = torch.empty(30, dtype=dtype)
        dist.scatter(got, scatter_list=s, src=root)
        same(got, vals(root, 30, dtype, seed=rank), "scatter %s" % dtype)


def split(src, dst):
    """Rows src sends dst in the uneven all-to-all: 0 to 4, some zero (as an
    MoE gate sends no token to some experts)."""
    return (src * 3 + dst * 5) % 5


def check_all_to_all(rank, n):
    cols = 3
    for dtype in DTYPES:
        # Equal blocks.
        inp = vals(rank, n * 6, dtype)
        out = torch.empty(n * 6, dtype=dtype)
        dist.all_to_all_single(out, inp)
        want = torch.cat([vals(r, n * 6, dtype)[rank * 6 : (rank + 1) * 6] for r in range(n)])
        same(out, want, "all_to_all_single %s" % dtype)
        # Uneven splits, rows of cols elements (MoE dispatch), then back (combine).
        send = [split(rank, d) for d in range(n)]
        recv = [split(s, rank) for s in range(n)]
        rows = [torch.full((send[d], cols), 0, dtype=torch.int64) + rank * 10 + d for d in range(n)]
        inp = torch.cat(rows).to(dtype)
        out = torch.empty(sum(recv), cols, dtype=dtype)
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
        want = torch.cat([torch.full((recv[s], cols), s * 10 + rank, dtype=torch.int64) for s in range(n)]).to(dtype)
        same(out, want, "all_to_all_single uneven %s" % dtype)
        back = torch.empty_like(inp)
        dist.all_to_all_single(back, out, output_split_sizes=send, input_split_sizes=recv)
        same(back, inp, "all_to_all_single combine %s" % dtype)
        # Lists of tensors of different sizes.
        ins = [torch.full((split(rank, d) + 1,), rank * 10 + d, dtype=torch.int64).to(dtype) for d in range(n)]
        outs = [torch.empty(split(s, rank) + 1, dtype=dtype) for s in range(n)]
        dist.all_to_all(outs, ins)
        for s in range(n):
            same(outs[s], torch.full((split(s, rank) + 1,), s * 10 + rank, dtype=torch.int64).to(dtype), "all_to_all %s from %d" % (dtype, s))


def hg_mapping(addr):
    """Whether a mapping of /proc/self/smaps advised for huge pages holds addr."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("VmFlags:"):
                return " hg" in line
    return False


def check_huge_buffers(rank, n):
    """all_to_all_single of 8 MiB per rank on tensors of occl.torch.empty:
    on 2 MiB boundaries in mappings advised for huge pages, right results,
    unmapped once the tensors and their views are gone; occl.empty gives
    NumPy arrays the same way."""
    count = 2 << 20  # float32: 8 MiB, 2 MiB per peer
    inp = occl.torch.empty(count)
    out = occl.torch.empty(count // 1024, 1024)
    for p in (inp.data_ptr(), out.data_ptr()):
        if p % (2 << 20) or not hg_mapping(p):
            raise AssertionError("occl.torch.empty: %#x not on a huge page boundary or not advised" % p)
    if float(out.abs().sum()) != 0:
        raise AssertionError("occl.torch.empty: not zeroed")
    inp.copy_(vals(rank, count, torch.float32, hi=1000))
    dist.all_to_all_single(out, inp.view(n, -1))
    blk = count // n
    want = torch.cat([vals(r, count, torch.float32, hi=1000)[rank * blk : (rank + 1) * blk] for r in range(n)])
    same(out.flatten(), want, "all_to_all_single on occl.torch.empty")
    a = occl.empty((512, 1024), "float64")
    if a.ctypes.data % (2 << 20) or not hg_mapping(a.ctypes.data) or a.any():
        raise AssertionError("occl.empty: %#x" % a.ctypes.data)
    addrs = [inp.data_ptr(), out.data_ptr(), a.ctypes.data]
    tail = out[1:]
    del inp, out, a
    gc.collect()
    if not hg_mapping(addrs[1]):
        raise AssertionError("occl.torch.empty: freed while a view of it lives")
    del tail
    gc.collect()
    if any(hg_mapping(x) for x in addrs):
        raise AssertionError("occl.torch.empty / occl.empty: memory not freed after the last view")


def check_p2p(rank, n):
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        t = vals(rank, 77, dtype)
        got = torch.empty(77, dtype=dtype)
        if rank % 2 == 0:
            dist.send(t, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(t, nxt)
        same(got, vals(prv, 77, dtype), "send/recv %s" % dtype)
        # Everyone sends first: batch_isend_irecv posts both together.
        big = vals(rank, 1 << 20, dtype)
        gotbig = torch.empty(1 << 20, dtype=dtype)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, big, nxt), dist.P2POp(dist.irecv, gotbig, prv)])
        for r in reqs:
            r.wait()
        same(gotbig, vals(prv, 1 << 20, dtype), "batch_isend_irecv %s" % dtype)
        # isend/irecv in an order the peer follows.
        if rank % 2 == 0:
            a = dist.isend(t, nxt)
            b = dist.irecv(got, prv)
        else:
            b = dist.irecv(got, prv)
            a = dist.isend(t, nxt)
        a.wait()
        b.wait()
        same(got, vals(prv, 77, dtype), "isend/irecv %s" % dtype)


def check_async(rank, n):
    ts = [vals(rank, 4096, torch.float32, seed=k) for k in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works[1:]]
    seen = []
    chained = futs[0].then(lambda f: seen.append(f.value()[0].sum().item()))
    works[0].wait()
    while not works[2].is_completed():
        pass
    for f in futs + [chained]:
        f.wait()
    for k, t in enumerate(ts):
        same(t, reference("sum", [vals(r, 4096, torch.float32, seed=k) for r in range(n)], torch.float32), "async all_reduce %d" % k)
        assert works[k].is_completed(), "work %d not completed after wait" % k
    assert futs[1].value()[0] is ts[2] or torch.equal(futs[1].value()[0], ts[2]), "future value is not the output"
    assert seen and seen[0] == ts[1].sum().item(), "future callback saw %s" % seen
    b = dist.barrier(async_op=True)
    b.wait()
    # A future's callbacks run on occl's threads, never on the thread that
    # waits for its work or asks whether it is done; once the work says it
    # is done, so does its future. (A callback attached to a future already
    # done runs at once, inside then, on the caller: torch's rule.)
    me = threading.get_ident()
    ran, attached = [], set()
    ws = [dist.all_reduce(vals(rank, 64, torch.float32, seed=k), async_op=True) for k in range(16)]
    fs = [w.get_future() for w in ws]
    chains = []
    for k, f in enumerate(fs):
        chains.append(f.then(lambda f, k=k: ran.append((k, threading.get_ident(), k in attached))))
        attached.add(k)
    for k, w in enumerate(ws):
        if k % 2:
            while not w.is_completed():
                pass
        else:
            w.wait()
        assert fs[k].done(), "work %d done, its future not" % k
    for c in chains:
        c.wait()
    assert sorted(k for k, _, _ in ran) == list(range(16)), "callbacks ran for %s" % sorted(k for k, _, _ in ran)
    on_caller = [k for k, t, after in ran if t == me and after]
    assert not on_caller, "the callbacks of works %s ran on the thread that waited for them" % on_caller


def check_groups(rank, n):
    odd = dist.new_group([1, 2, 3])
    pair = dist.new_group([0, 2])
    if rank in (1, 2, 3):
        assert dist.get_rank(odd) == rank - 1 and dist.get_world_size(odd) == 3
        t = vals(rank, 10, torch.int32)
        dist.all_reduce(t, group=odd)
        same(t, reference("sum", [vals(r, 10, torch.int32) for r in (1, 2, 3)], torch.int32), "all_reduce in group [1,2,3]")
        b = torch.tensor([rank])
        dist.broadcast(b, src=3, group=odd)  # src is a global rank
        same(b, torch.tensor([3]), "broadcast in group from global rank 3")
        comm = occl.torch.communicator(odd)
        assert comm.size == 3 and comm.rank == rank - 1
    else:
        assert odd == dist.GroupMember.NON_GROUP_MEMBER
    if rank in (0, 2):
        t = torch.full((5,), float(rank))
        out = [torch.empty(5) for _ in range(2)]
        dist.all_gather(out, t, group=pair)
        same(torch.stack(out), torch.stack([torch.zeros(5), torch.full((5,), 2.0)]), "all_gather in group [0,2]")
    dist.barrier()


def expect_error(fn, words, what):
    try:
        fn()
    except (RuntimeError, ValueError, TypeError) as e:
        msg = str(e)
        for w in words:
            if w not in msg:
                raise AssertionError("%s: error %r does not say %r" % (what, msg, w))
        return
    raise AssertionError("%s: no error" % what)


def check_errors(rank, n):
    nc = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()
    expect_error(lambda: dist.all_reduce(nc), ["contiguous"], "non-contiguous all_reduce")
    expect_error(lambda: dist.broadcast(torch.zeros(3, dtype=torch.complex64), 0), ["not supported"], "complex broadcast")
    c = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c)  # torch hands the backend a float32 view for SUM
    same(c, torch.full((3,), complex(n * (n - 1) / 2, n), dtype=torch.complex64), "complex all_reduce")
    expect_error(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.bool)), ["not supported by reductions"], "bool all_reduce")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND), ["not supported"], "BAND all_reduce")
    expect_error(lambda: dist.recv(torch.zeros(3)), ["any source"], "recv from any source")
    expect_error(lambda: dist.all_to_all_single(torch.empty(5), torch.empty(5)), ["multiple of"], "all_to_all_single of 5 elements")
    expect_error(
        lambda: dist.all_to_all_single(torch.empty(4), torch.empty(4), [1, 1, 1, 1], [1, 1, 1, 2]),
        ["split sizes add up"],
        "all_to_all_single with bad splits",
    )
    # The group is still usable, and in step on every rank.
    t = torch.ones(8)
    dist.all_reduce(t)
    same(t, torch.full((8,), float(n)), "all_reduce after errors")


def check_traffic(rank, n):
    occl.torch.set_traffic_tag("check/dispatch")
    cols = 4
    send = [split(rank, d) for d in range(n)]
    recv = [split(s, rank) for s in range(n)]
    inp = torch.zeros(sum(send), cols)
    out = torch.empty(sum(recv), cols)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
    occl.torch.set_traffic_tag(None)
    m = occl.torch.traffic_matrix(tag="check/dispatch")
    for s in range(n):
        for d in range(n):
            want = split(s, d) * cols * 4
            if m["ranks"][s][d] != want and not (s == d and m["ranks"][s][d] == 0):
                raise AssertionError("traffic %d->%d: %s bytes, want %d" % (s, d, m["ranks"][s][d], want))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", choices=["env", "tcp", "file"], default="env")
    p.add_argument("--file", default="")
    a = p.parse_args()
    timeout = datetime.timedelta(seconds=120)
    if a.init == "env":
        dist.init_process_group("occl", timeout=timeout)
    else:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if a.init == "tcp":
            method = "tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
        else:
            method = "file://" + a.file
        dist.init_process_group("occl", init_method=method, rank=rank, world_size=size, timeout=timeout)
    rank, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "occl", dist.get_backend()
    assert n == 4, "run on 4 processes"
    for check in (check_all_reduce, check_broadcast_reduce, check_gathers, check_all_to_all, check_huge_buffers, check_p2p, check_async, check_groups, check_errors, check_traffic):
        check(rank, n)
        print("rank %d: %s passed" % (rank, check.__name__), flush=True)
    dist.destroy_process_group()
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
