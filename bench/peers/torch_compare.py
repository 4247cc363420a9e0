#!/usr/bin/env python3
"""occl through torch.distributed, side by side with Gloo and with occl-bench
(occl's own benchmark, no Python) in the same run.

Run it with the Python that has the occl package installed (see
cgo/python), from the repository root:

    venv/bin/python bench/peers/torch_compare.py                # 3 rounds
    venv/bin/python bench/peers/torch_compare.py --table FILE   # print again

For each round, process count (2, 4), operation (all_reduce,
all_to_all_single, all_gather_into_tensor, broadcast) and implementation,
in an order that changes from round to round (compare.py's round_order, a
Williams design: over 6 of them every implementation runs at every position
and right after each of the other two equally often; interleaved, so that a
noisy moment hits every column alike), it runs three size sweeps, 8 B to 64 KiB
(1000 timed iterations), 128 KiB to 4 MiB (200) and 8 MiB to 64 MiB (20;
--iters sets one count for all), factor 2, of

    occl-torch  bench/peers/gloo_bench.py -backend occl   (torch.distributed on occl)
    gloo        bench/peers/gloo_bench.py -backend gloo   (torch.distributed on Gloo, TCP on lo)
    occl-bench  occl-bench -np N -op OP -z 1              (Go, no Python)

occl-bench runs blocking calls (-z 1: each operation waited for before the
next is issued), as torch.distributed's calls without async_op are, so that
the difference between the two is what the Python layer costs.

with results checked, and writes every JSON line to
bench/results/torch-compare-<date>.jsonl. A command that fails, or a result
that fails its check, is reported after the table, and the exit status is
then 1. The table gives the median time
of the rounds per point and three ratios: gloo / occl-torch (above 1:
occl is faster), occl-torch's bus bandwidth as a fraction of
occl-bench's (the cost of the Python layer at large sizes), and
occl-torch's time minus occl-bench's (its cost per call at small ones).
all_reduce and broadcast exist in torch.distributed only in place, so for
them occl-bench's in-place time is the one compared.
The runs on occl record occl's timeline (OCCL_TRACE), from which the last
two columns come: the median time of the operation inside occl, and the
median gap between the end of one operation and the start of the next
(what a call costs above occl: Python, torch.distributed, the backend and
the C ABI), measured in the same run, so that the Python layer's cost is
seen apart from the machine's drift between runs. --ops limits the
operations (e.g. --ops broadcast alltoall). Every rank is bound to its
share of the CPUs, as mpirun binds its ranks; --bind 0 leaves them unbound,
as torchrun does.
"""

import argparse
import collections
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from compare import round_order

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPS = ("allreduce", "alltoall", "allgather", "broadcast")
# The operations torch.distributed runs only in place (the result replaces
# the input): occl-bench's in-place column is what they compare with.
IN_PLACE = ("allreduce", "broadcast")
IMPLS = ("occl-torch", "gloo", "occl-bench")

# What went wrong in the commands run (an exit other than 0, results that
# failed their check): reported at the end, and the exit status is 1.
FAILURES = []


# The name occl's timeline gives each benchmarked operation.
TRACE_OPS = {"allreduce": "AllReduce", "alltoall": "AllToAll", "allgather": "AllGather", "broadcast": "Broadcast"}


def inside_occl(trace_dir, op, smallest):
    """Reads the timelines occl wrote into trace_dir (OCCL_TRACE) and
    returns, per buffer size in the order of the sizes, the median time of
    op inside occl and the median gap before it (from the end of the
    rank's previous operation: what each call costs above occl), in
    microseconds, over every rank (what occl-trace stats prints). smallest
    is the benchmark's smallest size in bytes."""
    durs, gaps = collections.defaultdict(list), collections.defaultdict(list)
    for name in sorted(os.listdir(trace_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(trace_dir, name)) as f:
            evs = [e for e in json.load(f).get("traceEvents", []) if e.get("cat") == "op" and e.get("ph") == "X"]
        evs.sort(key=lambda e: e["ts"])
        for i, e in enumerate(evs):
            if e.get("args", {}).get("op") != TRACE_OPS[op]:
                continue
            b = e["args"].get("bytes", 0)
            durs[b].append(e["dur"])
            if i > 0:
                prev = evs[i - 1]
                gaps[b].append(max(0.0, e["ts"] - prev["ts"] - prev["dur"]))
    # The benchmark's own calls are 8 B all_reduces (of the times, of the
    # check's count, and of the warm-up's progress after each size): in a
    # sweep of all_reduce they are the only ones of that size if it starts
    # above it, and a few among the timed calls if it starts at it. (Other
    # operations' sizes in the timeline need not be the benchmark's -b:
    # they are matched by order.)
    return [(statistics.median(durs[b]), statistics.median(gaps[b]) if gaps[b] else 0.0)
            for b in sorted(durs) if op != "allreduce" or b >= smallest]


def run(cmd, out, meta, op=None):
    """Runs cmd, appends its JSON lines (with meta) to out, returns them.
    With op, cmd runs occl under torch: its timeline is recorded and each
    line gets occl_us and gap_us (see inside_occl)."""
    env = None
    trace_dir = None
    if op:
        trace_dir = tempfile.mkdtemp(prefix="torch-compare-trace-")
        env = dict(os.environ, OCCL_TRACE=trace_dir)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800, env=env)
    rows = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        r.update(meta)
        rows.append(r)
    if trace_dir:
        inside = inside_occl(trace_dir, op, parse_size(cmd[cmd.index("-b") + 1]))
        # One timed size per buffer size, in increasing order on both sides.
        if len(inside) == len(rows):
            for r, (occl_us, gap_us) in zip(sorted(rows, key=lambda r: r["bytes"]), inside):
                r["occl_us"], r["gap_us"] = occl_us, gap_us
        else:
            print("torch_compare: %d sizes in the timeline, %d measured: no occl_us" % (len(inside), len(rows)), file=sys.stderr)
        shutil.rmtree(trace_dir, ignore_errors=True)
    for r in rows:
        out.write(json.dumps(r) + "\n")
    out.flush()
    if p.returncode != 0:
        print("torch_compare: %s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]), file=sys.stderr)
        FAILURES.append("%s exited %d" % (" ".join(cmd), p.returncode))
    for r in rows:
        if r.get("wrong", 0) not in (0, -1):
            print("torch_compare: WRONG RESULTS: %s" % r, file=sys.stderr)
            FAILURES.append("wrong results: %s %s np %s %s B" % (r.get("impl"), r.get("op"), r.get("np"), r.get("bytes")))
    return rows


def parse_size(v):
    """Parses a size with an optional K, M or G suffix (powers of 1024)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(v[-1:].upper(), 1)
    return int(v[:-1] if mult > 1 else v) * mult


def fmt_size(n):
    """Formats n bytes as parse_size reads them."""
    for suffix, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return "%d%s" % (n // mult, suffix)
    return str(n)


def measure(args):
    day = datetime.date.today().isoformat()
    path = args.out or os.path.join(ROOT, "bench", "results", "torch-compare-%s.jsonl" % day)
    tmp = tempfile.mkdtemp(prefix="torch-compare-")
    bench = os.path.join(tmp, "occl-bench")
    subprocess.check_call(["go", "build", "-o", bench, "./bench/cmd/occl-bench"], cwd=ROOT)
    top = parse_size(args.max)
    sweeps = [["-b", lo, "-e", fmt_size(min(parse_size(hi), top)), "-f", "2",
               "-n", str(args.iters or n), "-w", str(min(w, args.iters or w))]
              for lo, hi, n, w in (("8", "64K", 1000, 100), ("128K", "4M", 200, 20), ("8M", args.max, 20, 5))
              if parse_size(lo) <= top]
    with open(path, "a") as out:
        out.write(json.dumps({"meta": True, "date": datetime.datetime.now().isoformat(), "python": sys.executable,
                              "nproc": os.cpu_count(), "rounds": args.rounds}) + "\n")
        k = 0
        for rnd in range(args.rounds):
            for np_ in args.np:
                for op in args.ops:
                    order = [IMPLS[j] for j in round_order(len(IMPLS), k)]
                    k += 1
                    for impl in order:
                        meta = {"round": rnd, "impl": impl}
                        rows = []
                        for sweep in sweeps:
                            if impl == "occl-bench":
                                # Blocking, one call at a time, as torch.distributed's calls are.
                                cmd = [bench, "-np", str(np_), "-op", op, "-json", "-c", "1", "-z", "1",
                                       "-affinity=%s" % ("true" if args.bind else "false")] + sweep
                            else:
                                cmd = [sys.executable, os.path.join(HERE, "gloo_bench.py"), "-backend",
                                       "occl" if impl == "occl-torch" else "gloo", "-np", str(np_), "-op", op,
                                       "-json", "-c", "1", "-bind", str(args.bind)] + sweep
                            rows += run(cmd, out, meta, op if impl == "occl-torch" else None)
                        print("round %d np %d %-10s %-10s %d sizes" % (rnd, np_, op, impl, len(rows)), file=sys.stderr, flush=True)
    return path


def table(path, markdown):
    t = collections.defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        if r.get("meta") or "time_us" not in r:
            continue
        t[(r["op"], r["np"], r["bytes"], r["impl"])].append(r)
    keys = sorted({k[:3] for k in t})
    sep = " | " if markdown else "  "
    head = ["op", "np", "bytes", "occl-torch us", "gloo us", "occl-bench us", "gloo/occl-torch", "busbw torch/bench", "torch-bench us",
            "in occl us", "between us"]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print(sep.join("%14s" % h for h in head))
    for op, n, b in keys:
        med = {}
        bus = {}
        for impl in IMPLS:
            rows = t.get((op, n, b, impl), [])
            if rows:
                pre = "inplace_" if impl == "occl-bench" and op in IN_PLACE and "inplace_time_us" in rows[0] else ""
                med[impl] = statistics.median(r[pre + "time_us"] for r in rows)
                bus[impl] = statistics.median(r[pre + "busbw_GBps"] for r in rows)
        if "occl-torch" not in med:
            continue
        o = med["occl-torch"]
        cells = [op, str(n), str(b), "%.1f" % o, "%.1f" % med["gloo"] if "gloo" in med else "-",
                 "%.1f" % med["occl-bench"] if "occl-bench" in med else "-",
                 "%.2fx" % (med["gloo"] / o) if "gloo" in med else "-",
                 "%.2f" % (bus["occl-torch"] / bus["occl-bench"]) if bus.get("occl-bench") else "-",
                 "%+.1f" % (o - med["occl-bench"]) if "occl-bench" in med else "-"]
        inside = [r for r in t.get((op, n, b, "occl-torch"), []) if "occl_us" in r]
        cells += ["%.1f" % statistics.median(r["occl_us"] for r in inside) if inside else "-",
                  "%.1f" % statistics.median(r["gap_us"] for r in inside) if inside else "-"]
        if markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(sep.join("%14s" % c for c in cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--max", default="64M", help="largest size")
    ap.add_argument("--iters", type=int, default=0,
                    help="timed iterations of every size (default: 1000 up to 64 KiB, 200 up to 4 MiB, 20 above), "
                         "and at most as many warm-up ones")
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS, help="operations (default: all four)")
    ap.add_argument("--out", help="JSON lines file (default bench/results/torch-compare-<date>.jsonl)")
    ap.add_argument("--table", help="print the table of an existing file and exit")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--bind", type=int, default=1, choices=(0, 1),
                    help="1 (default): bind every rank to its share of the CPUs, as occl-bench and mpirun do; "
                         "0: leave the processes unbound, as torchrun does")
    a = ap.parse_args()
    if a.table:
        table(a.table, a.markdown)
        return 0
    path = measure(a)
    print("# %s" % path)
    table(path, a.markdown)
    if FAILURES:
        print("torch_compare: %d failures (the table leaves out what they did not measure):\n  %s"
              % (len(FAILURES), "\n  ".join(FAILURES)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
