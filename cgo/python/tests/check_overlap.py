"""Operations whose futures are asked for leave the cores to their caller
(2 ranks, run with OCCL_SHM_SPIN=10s so that a polling wait would poll for
its whole wait). DDP's reducer asks each bucket's all_reduce for its future
and goes on computing; the process group marks such an operation as
overlapping computation (occlRequestOverlap) when OCCL_FUTURE_OVERLAP=1, and
by default when an earlier future is still pending or was within the last 2
s, and a marked operation's shared-memory waits give the core away and sleep
instead of polling.

    --scenario always: with OCCL_FUTURE_OVERLAP=1, rank 1 comes 0.3 s late
                       to an all_reduce; rank 0 waits for it through the
                       work's future, then for another through a blocking
                       wait().
    --scenario auto:   with OCCL_FUTURE_OVERLAP unset, rank 0 issues two
                       all_reduces and asks for both futures at once (the
                       second is asked while the first is pending), then a
                       third, whose future is asked for alone but within 2
                       s of the second (marked), and a fourth, asked for
                       alone 2.5 s later (not marked); rank 1 comes 0.3 s
                       late to each.

Rank 0 reports the processor time its process used while it waited for
each; while it waited through a marked operation's future it must be under
half of the wait, and through an operation not marked over 40% of it (it
polled: all of it on an idle machine, at least half where the tests that run
beside it keep the other core busy). Each result is checked against the sum. Each rank prints "rank R:
ok" at the end (see two_ranks.py).
"""

import resource
import time

import torch
import torch.distributed as dist

import two_ranks

LATE = 0.3  # seconds rank 1 comes late


def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Waits:
    """Rank 0's waits: their wall and processor times, and which must not
    have polled."""

    def __init__(self):
        self.took, self.marked = {}, {}

    def time(self, what, fn, marked):
        """Times fn, a wait that must not poll if marked and must poll
        if not."""
        c0, w0 = cpu(), time.monotonic()
        fn()
        self.took[what] = (time.monotonic() - w0, cpu() - c0)
        self.marked[what] = marked

    def check(self):
        for what, (wall, proc) in self.took.items():
            print("rank 0: %s: %.0f ms, %.0f ms of processor time" % (what, wall * 1e3, proc * 1e3), flush=True)
        for what, marked in self.marked.items():
            wall, proc = self.took[what]
            if wall < LATE / 2:
                raise AssertionError("%s took %.0f ms: the peer was not late" % (what, wall * 1e3))
            if marked and proc > wall / 2:
                raise AssertionError("%s used %.0f ms of processor time in %.0f ms: it polled" % (what, proc * 1e3, wall * 1e3))
            if not marked and proc < wall * 0.4:
                raise AssertionError("%s used %.0f ms of processor time in %.0f ms: it did not poll" % (what, proc * 1e3, wall * 1e3))


def want_sum(got, what):
    if not torch.equal(got, torch.full((1024,), 3.0)):
        raise AssertionError("%s: all_reduce gave %s, want 3.0" % (what, got[:4].tolist()))


def always(rank, n):
    w = Waits()
    for mode in ("future", "blocking wait"):
        t = torch.full((1024,), float(rank + 1))
        dist.barrier()
        if rank == 1:
            time.sleep(LATE)
            dist.all_reduce(t)
        elif mode == "future":
            fut = dist.all_reduce(t, async_op=True).get_future()
            w.time(mode, fut.wait, True)
        else:
            w.time(mode, dist.all_reduce(t, async_op=True).wait, False)
        want_sum(t, mode)
    if rank == 0:
        w.check()


MEMORY = 2.0  # seconds futures are marked after one asked for while another was pending


def auto(rank, n):
    w = Waits()
    a, b, c, d = (torch.full((1024,), float(rank + 1)) for _ in range(4))
    dist.barrier()
    if rank == 1:
        for t in (a, b, c):
            time.sleep(LATE)
            dist.all_reduce(t)
        dist.barrier()
        time.sleep(LATE)
        dist.all_reduce(d)
    else:
        fa = dist.all_reduce(a, async_op=True).get_future()
        fb = dist.all_reduce(b, async_op=True).get_future()
        asked = time.monotonic()
        w.time("first future", fa.wait, False)
        w.time("second future, asked while the first was pending", fb.wait, True)
        fc = dist.all_reduce(c, async_op=True).get_future()
        if time.monotonic() - asked > MEMORY * 0.9:
            raise AssertionError("the third future came %.1f s after the second: too late to test" % (time.monotonic() - asked))
        w.time("third future, asked alone %.1f s after the second" % (time.monotonic() - asked), fc.wait, True)
        time.sleep(MEMORY + 0.5 - (time.monotonic() - asked))
        dist.barrier()
        fd = dist.all_reduce(d, async_op=True).get_future()
        w.time("fourth future, asked alone %.1f s after the second" % (time.monotonic() - asked), fd.wait, False)
        w.check()
    want_sum(a, "first all_reduce")
    want_sum(b, "second all_reduce")
    want_sum(c, "third all_reduce")
    want_sum(d, "fourth all_reduce")


SCENARIOS = {"always": always, "auto": auto}

if __name__ == "__main__":
    two_ranks.main(SCENARIOS)
