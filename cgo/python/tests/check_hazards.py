"""Scenarios on 2 ranks of the occl backend that once hung or went wrong:
each runs with a deadline (faulthandler prints every thread's stack and
exits with 1 when it passes), so a hang fails rather than blocks.

    --scenario chain:     a future's callback issues an operation and
                          waits for its future (the completion thread
                          must not run callbacks).
    --scenario powersgd:  DDP with PowerSGD's hook past its warm-up,
                          whose callbacks wait for other futures.
    --scenario pending:   reading and dropping a work whose operation waits
                          for a late peer returns at once, and dropping the
                          last work of an all_gather (whose input only the
                          work holds) while keeping its future.
    --scenario destroy_then: destroy_process_group with a future's Python
                          callback pending while the peer is late.
    --scenario destroy_isend: destroy_process_group after a fire-and-forget
                          isend.
    --scenario exit_callback: the interpreter exits while a completed
                          future's callback is still being released on the
                          thread that ran it (its closure's finalizer
                          needs the GIL for a while).
    --scenario tags:      a nonzero send/recv tag raises, also in a batch,
                          and leaves the group usable.
    --scenario abort:     operations after abort() raise that the group was
                          aborted (also the future of a batch aborted
                          before it was issued), and destroying it is safe.
Each rank prints "rank R: ok" at the end (see two_ranks.py); any failure raises.
"""

import time

import torch
import torch.distributed as dist

import occl.torch
import two_ranks

LATE = 2.0  # seconds the late peer sleeps


def same(got, want, what):
    if not torch.equal(got, want):
        raise AssertionError("%s: got %s, want %s" % (what, got.flatten()[:8].tolist(), want.flatten()[:8].tolist()))


def chain(rank, n):
    a, b = torch.full((4,), float(rank + 1)), torch.full((4,), float(rank + 10))

    def then(f):
        return dist.all_reduce(b, async_op=True).get_future().wait()[0]

    g = dist.all_reduce(a, async_op=True).get_future().then(then)
    got = g.wait()
    same(a, torch.full((4,), 3.0), "first all_reduce")
    same(got, torch.full((4,), 21.0), "all_reduce in the callback")


def powersgd(rank, n):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                    orthogonalization_epsilon=1e-6)
    ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)
    for it in range(5):
        opt.zero_grad()
        ddp(torch.randn(16, 32)).sum().backward()
        opt.step()
        print("rank %d: iteration %d done" % (rank, it), flush=True)
    # Every rank applied the same averaged gradients.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    outs = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(outs, flat)
    if not torch.isfinite(flat).all() or not torch.allclose(outs[0], outs[1]):
        raise AssertionError("parameters differ between the ranks, or are not finite")


def pending(rank, n):
    # Rank 1 comes late to each operation; rank 0 asks for its future, lets
    # the completion thread wait for it, then reads and drops the work.
    if rank == 1:
        time.sleep(LATE)
    t = torch.full((1 << 12,), float(rank))
    w = dist.all_reduce(t, async_op=True)
    f = w.get_future()
    time.sleep(0.3)
    start = time.monotonic()
    w.is_completed()
    w.is_success()
    w.result()
    del w
    took = time.monotonic() - start
    f.wait()
    same(t, torch.full((1 << 12,), 1.0), "all_reduce")
    # The input tensor lives only in the work: the completion thread
    # releases it (needing the GIL) while this thread drops the work.
    if rank == 1:
        time.sleep(LATE)
    outs = [torch.empty(4) for _ in range(n)]
    w = dist.all_gather(outs, torch.full((4,), float(rank)), async_op=True)
    f = w.get_future()
    time.sleep(0.3)
    del w
    f.wait()
    for r in range(n):
        same(outs[r], torch.full((4,), float(r)), "all_gather block %d" % r)
    if rank == 0 and took > LATE / 4:
        raise AssertionError("reading and dropping a pending work took %.2fs" % took)


def destroy_then(rank, n):
    # As in destroy_isend, the store outlives the group, and the barrier
    # keeps rank 0 from destroying the group (and the store it serves)
    # while rank 1 is still in init_process_group's store barrier.
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    if rank == 1:
        time.sleep(LATE)
    a = torch.ones(4)
    f = dist.all_reduce(a, async_op=True).get_future()
    g = f.then(lambda x: x.value()[0] * 2)
    dist.destroy_process_group()
    same(g.wait(), torch.full((4,), 4.0), "callback after destroy")
    if rank == 0:
        store.wait(["check_hazards/done"])
    else:
        store.set("check_hazards/done", "1")


def destroy_isend(rank, n):
    # The store outlives the group: rank 0, which serves it, waits there
    # for rank 1 to be done (a small send may complete before its receive).
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    if rank == 0:
        dist.isend(torch.ones(4), 1)
    else:
        time.sleep(LATE)
        t = torch.zeros(4)
        dist.recv(t, 0)
        same(t, torch.ones(4), "recv")
    dist.destroy_process_group()
    if rank == 0:
        store.wait(["check_hazards/done"])
    else:
        store.set("check_hazards/done", "1")


class SlowFinalizer:
    """Holds the GIL's release for a while when it goes: time.sleep drops
    the GIL, and its thread must take it back to return."""

    def __init__(self, rank):
        self.rank = rank

    def __del__(self):
        time.sleep(0.5)
        print("rank %d: callback released" % self.rank, flush=True)


def exit_callback(rank, n):
    # The callback's last reference is dropped by the thread that ran it,
    # after g's waiter woke: main returns and the interpreter starts to
    # exit while that thread sleeps in SlowFinalizer.__del__, which prints
    # "rank R: callback released" if it returns. Python ends a thread that
    # takes the GIL back once the interpreter is finalizing (pthread_exit,
    # which aborts the process from inside a destructor), so the backend
    # waits for its threads at exit.
    slow = SlowFinalizer(rank)
    f = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    g = f.then(lambda x, s=slow: x.value()[0] * 2)
    del slow
    same(g.wait(), torch.full((4,), 4.0), "callback")


def expect_error(fn, words, what):
    try:
        fn()
    except RuntimeError as e:
        for w in words:
            if w not in str(e):
                raise AssertionError("%s: error %r does not say %r" % (what, str(e), w))
        return
    raise AssertionError("%s: no error" % what)


def tags(rank, n):
    peer = 1 - rank
    t = torch.zeros(4)
    words = ["tags are not supported", "issue order"]
    if rank == 0:
        expect_error(lambda: dist.send(t, peer, tag=7), words, "send with a tag")
    else:
        expect_error(lambda: dist.recv(t, peer, tag=7), words, "recv with a tag")
    # Tagged messages posted in different orders (Gloo matches them by tag):
    # refused, never delivered into the wrong buffers.
    a, b = torch.full((4,), float(rank)), torch.full((4,), float(rank + 10))
    ra, rb = torch.zeros(4), torch.zeros(4)
    if rank == 0:
        ops = [dist.P2POp(dist.isend, a, peer, tag=1), dist.P2POp(dist.isend, b, peer, tag=2)]
    else:
        ops = [dist.P2POp(dist.irecv, rb, peer, tag=2), dist.P2POp(dist.irecv, ra, peer, tag=1)]
    expect_error(lambda: [w.wait() for w in dist.batch_isend_irecv(ops)], words, "batch with tags")
    # Nothing was posted: the group is usable and in step.
    ops = [dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, ra, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(ra, torch.full((4,), float(peer)), "batch after the refusal")
    s = torch.ones(4)
    dist.all_reduce(s)
    same(s, torch.full((4,), 2.0), "all_reduce after the refusals")


def abort(rank, n):
    t = torch.ones(4)
    dist.all_reduce(t)
    # A rank may return from the all_reduce before its peer has its half:
    # both say so through the store before either aborts, so that the
    # abort cannot fail the other's all_reduce.
    store = dist.distributed_c10d._get_default_store()
    store.set("check_hazards/reduced%d" % rank, "1")
    store.wait(["check_hazards/reduced%d" % (1 - rank)])
    pg = dist.distributed_c10d._get_default_group()
    words = ["the process group was aborted"]
    # The abort comes inside a batch whose send's future was asked for:
    # the batch fails as it is issued, and its future with it.
    futs = []

    def batch():
        with dist.distributed_c10d._coalescing_manager(pg, []):
            futs.append(dist.isend(t, 1 - rank).get_future())
            pg.abort()

    expect_error(batch, words, "batch aborted before it was issued")
    expect_error(futs[0].wait, words, "future of the aborted batch")
    expect_error(lambda: dist.all_reduce(t), words, "all_reduce after abort")
    expect_error(lambda: dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 1 - rank)]), words, "batch after abort")
    expect_error(lambda: occl.torch.shrink(), words, "shrink after abort")
    expect_error(lambda: occl.torch.communicator(), words, "communicator after abort")
    pg.abort()  # twice is harmless
    dist.destroy_process_group()


SCENARIOS = {f.__name__: f for f in (chain, powersgd, pending, destroy_then, destroy_isend, exit_callback, tags, abort)}


if __name__ == "__main__":
    two_ranks.main(SCENARIOS)
