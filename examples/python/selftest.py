#!/usr/bin/env python3
"""Checks the occl package across the ranks of a job (run it under occl's launcher):
every collective on NumPy arrays and PyTorch CPU tensors of every supported
type, zero-copy (results land in the caller's memory), non-blocking calls,
groups, split, a reconfiguration refused on every rank alike, and errors
raised with occlGetLastError's message, and the flight record. Exits non-zero on the first failure;
prints "rank R: ok"."""

import os
import sys

import numpy as np

import occl

try:
    import torch
except ImportError:  # the NumPy half still runs
    torch = None


def expect_error(fn, code, text):
    try:
        fn()
    except occl.OcclError as e:
        assert e.code == code, (e.code, str(e))
        assert text in str(e), str(e)
        return str(e)
    except (ValueError, TypeError) as e:
        assert code is None and text in str(e), str(e)
        return str(e)
    raise AssertionError("no error from %s" % fn)


def main():
    assert occl.version() >= 100
    comm = occl.Communicator.init_from_env()
    r, n = comm.rank, comm.size

    # NumPy, every type: sum in place, zero copy (same memory afterwards).
    for dt in ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]:
        a = np.arange(100, dtype=dt) % 7 + r
        addr = a.ctypes.data
        comm.all_reduce(a)
        assert a.ctypes.data == addr
        want = (np.arange(100) % 7) * n + n * (n - 1) // 2
        assert (a.astype(np.float64) == want).all(), (dt, a[:5], want[:5])
    f = np.full(1000, float(r), dtype=np.float64)
    out = np.empty_like(f)
    comm.all_reduce(f, out, op="avg")
    assert (out == (n - 1) / 2).all() and (f == r).all()
    comm.all_reduce(f, out, op="max")
    assert (out == n - 1).all()

    # Broadcast, all_gather, reduce_scatter, all_to_all, all_to_all_v.
    b = np.arange(10, dtype=np.int64) * (r + 1)
    comm.broadcast(b, root=n - 1)
    assert (b == np.arange(10) * n).all()
    g = np.empty(3 * n, dtype=np.float32)
    comm.all_gather(np.full(3, r, dtype=np.float32), g)
    assert (g == np.repeat(np.arange(n), 3)).all()
    rs = np.empty(2, dtype=np.int32)
    comm.reduce_scatter(np.arange(2 * n, dtype=np.int32), rs)
    assert (rs == n * np.arange(2 * r, 2 * r + 2)).all()
    a2a = np.arange(n * 4, dtype=np.int32) + 100 * r
    comm.all_to_all(a2a)  # in place
    assert (a2a == np.concatenate([np.arange(4 * r, 4 * r + 4) + 100 * j for j in range(n)])).all()
    sc = [j + 1 for j in range(n)]
    rc = [r + 1] * n
    send = np.concatenate([np.full(j + 1, r * 10 + j, dtype=np.float64) for j in range(n)])
    recv = np.empty(sum(rc), dtype=np.float64)
    comm.all_to_all_v(send, sc, recv, rc)
    assert (recv == np.repeat([j * 10 + r for j in range(n)], r + 1)).all()

    # Non-blocking, then a group ring exchange.
    big = np.ones(1 << 16, dtype=np.float32)
    w = comm.all_reduce(big, async_op=True)
    w.overlap()  # the caller would compute until it waits: occl's waits leave it the core
    w.wait()
    w.overlap()  # once waited for, nothing to do
    assert w.is_completed() and (big == n).all()
    src = np.full(5, r, dtype=np.int64)
    dst = np.empty(5, dtype=np.int64)
    with occl.group():
        comm.send(src, (r + 1) % n)
        comm.recv(dst, (r - 1) % n)
    assert (dst == (r - 1) % n).all()

    # PyTorch CPU tensors, bfloat16 included, views with an offset.
    if torch is not None:
        for dt in [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]:
            t = torch.ones(64, dtype=dt) * (r + 1)
            ptr = t.data_ptr()
            comm.all_reduce(t)
            assert t.data_ptr() == ptr and bool((t.double() == n * (n + 1) / 2).all()), (dt, t[:4])
        base = torch.zeros(10, dtype=torch.float32)
        view = base[4:8]  # contiguous, storage offset 4
        view.fill_(r)
        comm.all_reduce(view, op="sum")
        assert bool((base[4:8] == n * (n - 1) / 2).all()) and bool((base[:4] == 0).all())
        t = torch.arange(8, dtype=torch.float64) + r
        o = torch.empty(8 * n, dtype=torch.float64)
        comm.all_gather(t, o)
        assert bool((o.view(n, 8) == torch.arange(8, dtype=torch.float64) + torch.arange(n).view(n, 1)).all())
        expect_error(lambda: comm.all_reduce(torch.ones(4, 4).t()), None, "not contiguous")
        expect_error(lambda: comm.all_reduce(torch.ones(4, dtype=torch.complex64)), None, "unsupported")

    # Split into halves.
    half = comm.split(r % 2)
    x = np.array([r], dtype=np.int32)
    half.all_reduce(x)
    assert x[0] == sum(i for i in range(n) if i % 2 == r % 2)
    # Without a topology (OCCL_TOPO) there is nothing to rewire: every rank
    # gets the same error, and both communicators keep working.
    target = {"name": "flat", "hosts": [{"name": "h%d" % i} for i in range(n)],
              "ranks": [{"host": i, "nic": -1} for i in range(n)]}
    msg = expect_error(lambda: comm.reconfigure(target, [half]), 2, "no topology to rewire")
    assert "plan failed on rank 0" in msg, msg
    half.all_reduce(x)
    assert x[0] == 2 * sum(i for i in range(n) if i % 2 == r % 2)
    half.destroy()
    assert comm.split(None) is None  # every rank takes part, none gets a communicator

    # Errors: from Python's checks, and from the library with its message.
    expect_error(lambda: comm.all_reduce(np.ones(4)[::2]), None, "not C-contiguous")
    expect_error(lambda: comm.all_reduce(np.ones(4, dtype=np.complex64)), None, "unsupported")
    expect_error(lambda: comm.all_reduce([1, 2]), None, "numpy.ndarray or a CPU torch.Tensor")
    expect_error(lambda: comm.all_reduce(np.ones(4), op="mean"), None, "unknown reduction")
    msg = expect_error(lambda: comm.send(np.ones(4), n + 3), 4, "peer %d out of range" % (n + 3))
    assert msg.startswith("occlInvalidArgument: occlSend"), msg
    expect_error(lambda: comm.broadcast(np.ones(4), root=-2), 4, "root -2 out of range")
    assert comm.async_error() is None
    comm.barrier()
    # The flight record ends with that barrier, done, after the checks'
    # collectives in sequence order.
    rec = comm.flight_record()
    last = rec[-1]
    assert last["op"] == "Barrier" and last["state"] == "done" and last["peer"] == -1, last
    seqs = [o["seq"] for o in rec if o["seq"] > 0]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[-1] == last["seq"], seqs
    assert any(o["op"] == "AllReduce" and o["schedule"] and o["bytes"] > 0 for o in rec), rec
    comm.destroy()
    expect_error(lambda: comm.barrier(), 4, "destroyed")
    print("rank %d: ok" % r)


if __name__ == "__main__":
    main()
