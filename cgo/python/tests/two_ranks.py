"""The frame of the scripts that run scenarios on 2 ranks of the occl
backend (check_hazards.py, check_overlap.py): main parses --scenario and
--deadline, joins the group under the deadline (faulthandler prints every
thread's stack and exits with 1 when it passes, so that a hang fails rather
than blocks), runs the scenario with the rank and the group's size, ends
the group if the scenario left it, and prints "rank R: ok".
"""

import argparse
import datetime
import faulthandler

import torch.distributed as dist

import occl.torch  # noqa: F401 (registers the backend)


def main(scenarios):
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=sorted(scenarios), required=True)
    p.add_argument("--deadline", type=float, default=30)
    a = p.parse_args()
    faulthandler.dump_traceback_later(a.deadline, exit=True)
    dist.init_process_group("occl", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    assert n == 2, "run on 2 processes"
    scenarios[a.scenario](rank, n)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    print("rank %d: ok" % rank, flush=True)
