#!/usr/bin/env python3
"""occl through torch.distributed, side by side with Gloo and with occl-bench
(occl's own benchmark, no Python) in the same run.

Run it with the Python that has the occl package installed (see
cgo/python), from the repository root:

    venv/bin/python bench/peers/torch_compare.py                # 3 rounds
    venv/bin/python bench/peers/torch_compare.py --table FILE   # print again

For each round, process count (2, 4), operation (all_reduce,
all_to_all_single, all_gather_into_tensor, broadcast) and implementation,
in an order that rotates from round to round (interleaved, so that a noisy
moment hits every column alike), it runs three size sweeps, 8 B to 64 KiB
(1000 timed iterations), 128 KiB to 4 MiB (200) and 8 MiB to 64 MiB (20),
factor 2, of

    occl-torch  bench/peers/gloo_bench.py -backend occl   (torch.distributed on occl)
    gloo        bench/peers/gloo_bench.py -backend gloo   (torch.distributed on Gloo, TCP on lo)
    occl-bench  occl-bench -np N -op OP -z 1              (Go, no Python)

occl-bench runs blocking calls (-z 1: each operation waited for before the
next is issued), as torch.distributed's calls without async_op are, so that
the difference between the two is what the Python layer costs.

with results checked, and writes every JSON line to
bench/results/torch-compare-<date>.jsonl. The table gives the median time
of the rounds per point and three ratios: gloo / occl-torch (above 1:
occl is faster), occl-torch's bus bandwidth as a fraction of
occl-bench's (the cost of the Python layer at large sizes), and
occl-torch's time minus occl-bench's (its cost per call at small ones).
"""

import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPS = ("allreduce", "alltoall", "allgather", "broadcast")
IMPLS = ("occl-torch", "gloo", "occl-bench")


def run(cmd, out, meta):
    """Runs cmd, appends its JSON lines (with meta) to out, returns them."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    rows = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        r.update(meta)
        rows.append(r)
        out.write(json.dumps(r) + "\n")
    out.flush()
    if p.returncode != 0:
        print("torch_compare: %s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]), file=sys.stderr)
    for r in rows:
        if r.get("wrong", 0) not in (0, -1):
            print("torch_compare: WRONG RESULTS: %s" % r, file=sys.stderr)
    return rows


def measure(args):
    day = datetime.date.today().isoformat()
    path = args.out or os.path.join(ROOT, "bench", "results", "torch-compare-%s.jsonl" % day)
    tmp = tempfile.mkdtemp(prefix="torch-compare-")
    bench = os.path.join(tmp, "occl-bench")
    subprocess.check_call(["go", "build", "-o", bench, "./bench/cmd/occl-bench"], cwd=ROOT)
    sweeps = [["-b", "8", "-e", "64K", "-f", "2", "-n", "1000", "-w", "100"],
              ["-b", "128K", "-e", "4M", "-f", "2", "-n", "200", "-w", "20"],
              ["-b", "8M", "-e", args.max, "-f", "2", "-n", "20", "-w", "5"]]
    with open(path, "a") as out:
        out.write(json.dumps({"meta": True, "date": datetime.datetime.now().isoformat(), "python": sys.executable,
                              "nproc": os.cpu_count(), "rounds": args.rounds}) + "\n")
        k = 0
        for rnd in range(args.rounds):
            for np_ in args.np:
                for op in OPS:
                    order = IMPLS[k % 3 :] + IMPLS[: k % 3]
                    k += 1
                    for impl in order:
                        meta = {"round": rnd, "impl": impl}
                        rows = []
                        for sweep in sweeps:
                            if impl == "occl-bench":
                                # Blocking, one call at a time, as torch.distributed's calls are.
                                cmd = [bench, "-np", str(np_), "-op", op, "-json", "-c", "1", "-z", "1"] + sweep
                            else:
                                cmd = [sys.executable, os.path.join(HERE, "gloo_bench.py"), "-backend",
                                       "occl" if impl == "occl-torch" else "gloo", "-np", str(np_), "-op", op,
                                       "-json", "-c", "1"] + sweep
                            rows += run(cmd, out, meta)
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
    head = ["op", "np", "bytes", "occl-torch us", "gloo us", "occl-bench us", "gloo/occl-torch", "busbw torch/bench", "torch-bench us"]
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
                med[impl] = statistics.median(r["time_us"] for r in rows)
                bus[impl] = statistics.median(r["busbw_GBps"] for r in rows)
        if "occl-torch" not in med:
            continue
        o = med["occl-torch"]
        cells = [op, str(n), str(b), "%.1f" % o, "%.1f" % med["gloo"] if "gloo" in med else "-",
                 "%.1f" % med["occl-bench"] if "occl-bench" in med else "-",
                 "%.2fx" % (med["gloo"] / o) if "gloo" in med else "-",
                 "%.2f" % (bus["occl-torch"] / bus["occl-bench"]) if bus.get("occl-bench") else "-",
                 "%+.1f" % (o - med["occl-bench"]) if "occl-bench" in med else "-"]
        if markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(sep.join("%14s" % c for c in cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--max", default="64M", help="largest size")
    ap.add_argument("--out", help="JSON lines file (default bench/results/torch-compare-<date>.jsonl)")
    ap.add_argument("--table", help="print the table of an existing file and exit")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    if a.table:
        table(a.table, a.markdown)
        return
    path = measure(a)
    print("# %s" % path)
    table(path, a.markdown)


if __name__ == "__main__":
    main()
