"""With OCCL_FUTURE_OVERLAP=1, a future's operation leaves the cores to its
caller (2 ranks, run with OCCL_SHM_SPIN=10s so that a polling wait would
poll for its whole wait): DDP's reducer asks each bucket's all_reduce for
its future and goes on computing, and the process group then marks such
operations as overlapping computation (occlRequestOverlap), whose
shared-memory waits give the core away and sleep instead of polling. Rank 1 comes 0.3 s late to an
all_reduce; rank 0 waits for it through the work's future and then through
a blocking wait(), and reports how much processor time its process used
during each. The future's must be under half of its wait (the blocking
wait, which polls, is reported for comparison). Each result is checked
against the sum. Each rank prints "rank R: ok" at the end.
"""

import argparse
import datetime
import faulthandler
import resource
import time

import torch
import torch.distributed as dist

import occl.torch

LATE = 0.3  # seconds rank 1 comes late


def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--deadline", type=float, default=30)
    a = p.parse_args()
    faulthandler.dump_traceback_later(a.deadline, exit=True)
    dist.init_process_group("occl", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    assert n == 2, "run on 2 processes"
    took = {}
    for mode in ("future", "wait"):
        t = torch.full((1024,), float(rank + 1))
        dist.barrier()
        if rank == 1:
            time.sleep(LATE)
        c0, w0 = cpu(), time.monotonic()
        work = dist.all_reduce(t, async_op=True)
        if mode == "future":
            got = work.get_future().wait()[0]
        else:
            work.wait()
            got = t
        took[mode] = (time.monotonic() - w0, cpu() - c0)
        if not torch.equal(got, torch.full((1024,), 3.0)):
            raise AssertionError("%s: all_reduce gave %s, want 3.0" % (mode, got[:4].tolist()))
    if rank == 0:
        (fw, fc), (ww, wc) = took["future"], took["wait"]
        print("rank 0: through the future %.0f ms, %.0f ms of processor time; blocking wait %.0f ms, %.0f ms"
              % (fw * 1e3, fc * 1e3, ww * 1e3, wc * 1e3), flush=True)
        if fw < LATE / 2:
            raise AssertionError("the wait through the future took %.0f ms: the peer was not late" % (fw * 1e3))
        if fc > fw / 2:
            raise AssertionError("waiting through the future used %.0f ms of processor time in %.0f ms: it polled"
                                 % (fc * 1e3, fw * 1e3))
    dist.barrier()
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
