#!/usr/bin/python3
"""nccl-tests style benchmark of a torch.distributed backend on CPU tensors:
Gloo by default, occl's with -backend occl (the occl package installed,
see cgo/python).

The script launches its own ranks: the parent picks a free TCP port on
127.0.0.1, starts -np copies of itself as separate processes, waits for them
and returns the first non-zero exit code (killing the others after a short
grace period, so a failed rank never leaves the job hanging).

    /usr/bin/python3 bench/peers/gloo_bench.py -np 2 -op allreduce \\
        -b 8 -e 64M -f 2 -n 20 -w 5 -d float32 -c 1

Output: one JSON object per line and per size on stdout (rank 0 only), with
the same fields as occl-bench -json, and an nccl-tests style table on stderr.

Sizes and bandwidths follow nccl-tests (src/common.cu setupArgs/BenchTime and
the per-collective *GetCollByteCount/*GetBw functions, doc/PERFORMANCE.md):

  * The -b/-e/-f sweep gives a size S in bytes; count = S / sizeof(dtype).
  * allreduce, broadcast, reduce: one buffer of `count` elements per rank;
    "bytes" = count*eltsize and "count" = count.
  * alltoallv (all_to_all_single with split sizes): the elements of the
    alltoall of the same size spread over the pairs by -skew (zipf:S: rank
    s sends rank d a share proportional to 1/(d+1)^S, rounded down), as
    occl-bench's and mpi_bench's -skew do; "bytes" and "count" are the
    alltoall's.
  * allgather, reducescatter, alltoall: the per-rank chunk is
    base = (count / np) rounded down to a multiple of 16 bytes' worth of
    elements, exactly as current nccl-tests does. "count" is that per-rank
    count (the count argument of ncclAllGather/ncclReduceScatter, and the
    per-peer count of alltoall), and "bytes" is the larger of the send and
    receive buffers = base*np*eltsize: the allgather OUTPUT, the
    reducescatter INPUT, the whole alltoall send buffer.
  * algbw = bytes / time (GB = 1e9 bytes); busbw = algbw * factor with
    factor 2(n-1)/n for allreduce, (n-1)/n for allgather, reducescatter and
    alltoall, 1 for broadcast and reduce.
  * time = the MAX over ranks of each rank's average time per iteration
    (nccl-tests' default "-a" reduction across processes is the average; the
    occl comparison uses the max, which is never flattering).
  * Sizes whose per-rank chunk rounds down to 0 elements are skipped.

Fairness on a small host: every rank runs torch with one intra-op thread
(torch.set_num_threads(1), OMP_NUM_THREADS=1), so np ranks use np compute
threads in all three implementations, and (-bind 1, the default) each rank
is bound to its share of the CPUs by the same rule occl-bench uses (mpirun
binds its ranks too). Gloo still runs its own I/O threads,
as it always does. Gloo talks over TCP on the loopback interface only
(GLOO_SOCKET_IFNAME=lo, rendezvous on 127.0.0.1).

torch's allreduce, broadcast and reduce exist only in place (the result
overwrites the input tensor), so for those three the timed loop is in place;
adding a copy to imitate out-of-place would charge Gloo for work it does not
do. allgather and alltoall are out of place. Collectives that this torch's
Gloo backend does not implement (reducescatter in torch 1.13) are reported as
unsupported with exit code 3; nothing is printed for them.
"""

import argparse
import datetime
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

OPS = ("allreduce", "allgather", "alltoall", "alltoallv", "reducescatter", "broadcast", "reduce", "sendrecv")
SPLIT = ("allgather", "reducescatter", "alltoall", "alltoallv")
REDUCING = ("allreduce", "reducescatter", "reduce")

# busbw / algbw, from nccl-tests doc/PERFORMANCE.md.
def busbw_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in SPLIT:
        return (n - 1) / n
    return 1.0

EXIT_UNSUPPORTED = 3


def sig(x):
    """x rounded to 6 significant digits, for compact JSON."""
    return float("%.6g" % x)


def parse_size(text):
    """Parse a byte size like nccl-tests: a number with an optional K, M or G
    suffix (powers of 1024)."""
    t = text.strip()
    mult = 1
    if t and t[-1] in "kKmMgG":
        mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[t[-1].lower()]
        t = t[:-1]
    try:
        v = float(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError("bad size %r" % text)
    if v < 0:
        raise argparse.ArgumentTypeError("negative size %r" % text)
    return int(v)


def size_sweep(minb, maxb, factor, step):
    """The sizes nccl-tests visits: multiply by factor if > 1, else add step."""
    sizes = []
    s = minb
    while s <= maxb:
        sizes.append(s)
        if factor > 1:
            s *= factor
        else:
            if step <= 0:
                break
            s += step
    return sizes


def layout(op, size, elt, n):
    """Return (param_count, bytes) for one point of the sweep, following
    nccl-tests' *GetCollByteCount: param_count is the count argument of the
    collective (per-rank chunk for allgather/reducescatter/alltoall), bytes the
    size column (max of send and receive buffer)."""
    count = size // elt
    if op in SPLIT:
        align = max(1, 16 // elt)
        base = (count // n) // align * align
        return base, base * n * elt
    return count, count * elt


def parse_skew(text):
    """-skew: "uniform" (None) or "zipf:S" with S >= 0 (S)."""
    if text == "uniform":
        return None
    if text.startswith("zipf:"):
        try:
            v = float(text[len("zipf:"):])
        except ValueError:
            v = -1.0
        if v >= 0 and v != float("inf"):
            return v
    raise argparse.ArgumentTypeError("bad -skew %r (uniform or zipf:S with S >= 0)" % text)


def skew_counts(zipf, n, pc):
    """alltoallv's counts: counts[s][d] elements from rank s to rank d, the
    n*n*pc elements of the uniform all-to-all of pc elements per pair spread
    over the pairs in proportion to the weights 1/(d+1)^S of the
    destinations (all 1 for uniform), rounded down: occl-bench's
    Demand.Counts, computed in mpi_bench.c's order of operations."""
    w = [1.0 if zipf is None else 1.0 / math.pow(d + 1, zipf) for d in range(n)]
    total = 0.0
    for d in range(n):
        total += float(n) * w[d]
    return [[int(w[d] / total * float(n * n * pc)) for d in range(n)] for _ in range(n)]


def build_parser():
    p = argparse.ArgumentParser(
        prog="gloo_bench.py", allow_abbrev=False,
        description="nccl-tests style benchmark of torch.distributed/Gloo (CPU).")
    p.add_argument("-np", dest="np", type=int, default=2, help="number of ranks (processes)")
    p.add_argument("-backend", dest="backend", default="gloo", choices=("gloo", "occl"),
                   help="torch.distributed backend (occl: import occl.torch)")
    p.add_argument("-op", dest="op", default="allreduce", choices=OPS)
    p.add_argument("-b", dest="minbytes", type=parse_size, default=parse_size("8"))
    p.add_argument("-e", dest="maxbytes", type=parse_size, default=parse_size("64M"))
    p.add_argument("-f", dest="stepfactor", type=int, default=2, help="multiply size by this (>1)")
    p.add_argument("-i", dest="stepbytes", type=parse_size, default=parse_size("1M"),
                   help="add this to the size when -f is 1")
    p.add_argument("-n", dest="iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("-w", dest="warmup", type=int, default=5, help="warm-up iterations per size")
    p.add_argument("-t", dest="warmup_ms", type=float, default=20,
                   help="least time in milliseconds the warm-up of each size lasts: more "
                   "warm-up iterations follow -w's, as many on every rank, if they take less "
                   "(0: -w alone), as occl-bench's -warmup-time")
    p.add_argument("-d", dest="dtype", default="float32",
                   choices=("float32", "float64", "int32", "int64"))
    p.add_argument("-o", dest="redop", default="sum", choices=("sum", "prod", "max", "min"))
    p.add_argument("-r", dest="root", type=int, default=0, help="root of broadcast/reduce")
    p.add_argument("-c", dest="check", type=int, default=0, help="1: check results")
    p.add_argument("-skew", dest="skew", type=parse_skew, default=None, metavar="uniform|zipf:S",
                   help="alltoallv's demand, as occl-bench's -skew: every rank sends rank d a share "
                        "proportional to 1/(d+1)^S of the uniform all-to-all's elements (default uniform)")
    p.add_argument("-transport", dest="transport", default="tcp",
                   help="label for the JSON records (Gloo on CPU always uses TCP)")
    p.add_argument("-json", dest="json", action="store_true",
                   help="accepted for symmetry with occl-bench; JSON is always printed")
    p.add_argument("-bind", dest="bind", type=int, default=1,
                   help="1: bind each rank to its share of the CPUs, as occl-bench and mpirun do")
    p.add_argument("-timeout", dest="timeout", type=float, default=900.0,
                   help="seconds before the launcher kills the job")
    # Internal: set by the launcher for each rank.
    p.add_argument("--rank", dest="rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--port", dest="port", type=int, default=0, help=argparse.SUPPRESS)
    return p


# ---------------------------------------------------------------- launcher --

def free_port():
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, argv):
    port = free_port()
    env = dict(os.environ)
    env.update({
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    procs = []
    for r in range(args.np):
        cmd = [sys.executable, os.path.abspath(__file__)] + argv + [
            "--rank", str(r), "--port", str(port)]
        # Only rank 0 reports; the others keep stderr for errors.
        out = None if r == 0 else subprocess.DEVNULL
        procs.append(subprocess.Popen(cmd, env=env, stdout=out))

    deadline = time.monotonic() + args.timeout
    grace_end = None
    first_bad = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            bad = [c for c in codes if c not in (None, 0)]
            if bad and first_bad == 0:
                first_bad = bad[0]
                grace_end = time.monotonic() + 5.0
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if now > deadline or (grace_end is not None and now > grace_end):
                if now > deadline:
                    print("gloo_bench: timeout after %.0f s, killing ranks" % args.timeout,
                          file=sys.stderr)
                    first_bad = first_bad or 124
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                for p in procs:
                    p.wait()
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        return 130
    if first_bad:
        return first_bad
    for p in procs:
        if p.returncode:
            return p.returncode
    return 0


# -------------------------------------------------------------------- rank --

class Unsupported(Exception):
    """The Gloo backend of this torch has no implementation of an op."""


def _is_unsupported(err):
    msg = str(err).lower()
    return "not support" in msg or "no support" in msg


def cpu_share(allowed, rank, n):
    """The CPUs of local rank `rank` of n: the allowed CPUs split into n
    contiguous groups, shared round-robin when there are more ranks than
    CPUs (the same rule occl-bench uses)."""
    allowed = sorted(allowed)
    if n >= len(allowed):
        return [allowed[rank % len(allowed)]]
    return allowed[rank * len(allowed) // n:(rank + 1) * len(allowed) // n]


def run_rank(args):
    if args.bind:
        os.sched_setaffinity(0, cpu_share(os.sched_getaffinity(0), args.rank, args.np))
    import torch
    import torch.distributed as dist

    if args.backend == "occl":
        import occl.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    rank, n = args.rank, args.np
    # The same deadline as the launcher's, for rendezvous and every collective.
    dist.init_process_group(args.backend, init_method="tcp://127.0.0.1:%d" % args.port,
                            rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=args.timeout))
    dtype = {"float32": torch.float32, "float64": torch.float64,
             "int32": torch.int32, "int64": torch.int64}[args.dtype]
    elt = torch.tensor([], dtype=dtype).element_size()
    redop = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
             "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[args.redop]
    root = args.root
    op = args.op
    if not 0 <= root < n:
        raise SystemExit("gloo_bench: root %d out of range" % root)

    # Test data. Every value is a small integer, exact in every dtype, so a
    # result can be compared for equality. Reductions use values 1..7 (a
    # product over 8 ranks still fits a float32 mantissa); data movement uses
    # 0..250 with a rank-dependent phase so that a misplaced chunk shows.
    def pattern(r, nelem, offset=0):
        i = torch.arange(offset, offset + nelem, dtype=torch.int64)
        if op in REDUCING:
            v = (i + 3 * r) % 7 + 1
        else:
            v = (i + 37 * r) % 251
        return v.to(dtype)

    def reduce_expected(nelem, offset=0):
        acc = pattern(0, nelem, offset).to(torch.float64)
        for r in range(1, n):
            v = pattern(r, nelem, offset).to(torch.float64)
            if args.redop == "sum":
                acc = acc + v
            elif args.redop == "prod":
                acc = acc * v
            elif args.redop == "max":
                acc = torch.maximum(acc, v)
            else:
                acc = torch.minimum(acc, v)
        return acc.to(dtype)

    api = {"name": None}

    def make_case(pc):
        """Allocate buffers for one size; return (run, fill_for_check,
        count_wrong). run() executes the collective once."""
        if op == "allreduce":
            buf = pattern(rank, pc)

            def run():
                dist.all_reduce(buf, op=redop)

            def fill():
                buf.copy_(pattern(rank, pc))

            def wrong():
                return int((buf != reduce_expected(pc)).sum())
            api["name"] = "all_reduce"
            return run, fill, wrong

        if op == "broadcast":
            buf = pattern(rank, pc)

            def run():
                dist.broadcast(buf, src=root)

            def fill():
                buf.copy_(pattern(rank, pc))

            def wrong():
                return int((buf != pattern(root, pc)).sum())
            api["name"] = "broadcast"
            return run, fill, wrong

        if op == "reduce":
            buf = pattern(rank, pc)

            def run():
                dist.reduce(buf, dst=root, op=redop)

            def fill():
                buf.copy_(pattern(rank, pc))

            def wrong():
                if rank != root:
                    return 0
                return int((buf != reduce_expected(pc)).sum())
            api["name"] = "reduce"
            return run, fill, wrong

        if op == "sendrecv":
            # A ring step, as occl-bench's and mpi_bench's sendrecv: pc
            # elements to the next rank, from the previous one, posted
            # together (batch_isend_irecv).
            send = pattern(rank, pc)
            recv = torch.empty(pc, dtype=dtype)
            right, left = (rank + 1) % n, (rank + n - 1) % n

            def run():
                ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            def fill():
                send.copy_(pattern(rank, pc))
                recv.zero_()

            def wrong():
                return int((recv != pattern(left, pc)).sum())
            api["name"] = "batch_isend_irecv"
            return run, fill, wrong

        if op == "alltoall":
            # pc elements go to each peer; the send buffer holds n chunks.
            send = pattern(rank, pc * n)
            recv = torch.empty(pc * n, dtype=dtype)

            def run():
                dist.all_to_all_single(recv, send)

            def fill():
                send.copy_(pattern(rank, pc * n))
                recv.zero_()

            def wrong():
                exp = torch.cat([pattern(s, pc, offset=rank * pc) for s in range(n)])
                return int((recv != exp).sum())
            api["name"] = "all_to_all_single"
            return run, fill, wrong

        if op == "alltoallv":
            # The uniform all-to-all's elements spread by -skew: rank s
            # sends counts[s][d] to rank d, from its send buffer in rank
            # order, and receives counts[s][rank] from every s.
            counts = skew_counts(args.skew, n, pc)
            scounts = counts[rank]
            rcounts = [counts[s][rank] for s in range(n)]
            send = pattern(rank, sum(scounts))
            recv = torch.empty(sum(rcounts), dtype=dtype)

            def run():
                dist.all_to_all_single(recv, send, output_split_sizes=rcounts, input_split_sizes=scounts)

            def fill():
                send.copy_(pattern(rank, sum(scounts)))
                recv.zero_()

            def wrong():
                exp = torch.cat([pattern(s, counts[s][rank], offset=sum(counts[s][:rank])) for s in range(n)])
                return int((recv != exp).sum())
            api["name"] = "all_to_all_single with split sizes"
            return run, fill, wrong

        if op == "allgather":
            send = pattern(rank, pc)
            recv = torch.empty(pc * n, dtype=dtype)
            # Views of one contiguous output, so the list API writes the
            # same buffer all_gather_into_tensor would.
            parts = list(recv.chunk(n))
            use_tensor_api = [hasattr(dist, "all_gather_into_tensor")]

            def run():
                if use_tensor_api[0]:
                    try:
                        dist.all_gather_into_tensor(recv, send)
                        api["name"] = "all_gather_into_tensor"
                        return
                    except RuntimeError as e:
                        if not _is_unsupported(e):
                            raise
                        use_tensor_api[0] = False
                dist.all_gather(parts, send)
                api["name"] = "all_gather"

            def fill():
                send.copy_(pattern(rank, pc))
                recv.zero_()

            def wrong():
                exp = torch.cat([pattern(s, pc) for s in range(n)])
                return int((recv != exp).sum())
            return run, fill, wrong

        if op == "reducescatter":
            send = pattern(rank, pc * n)
            recv = torch.empty(pc, dtype=dtype)
            ins = list(send.chunk(n))

            def run():
                errs = []
                if hasattr(dist, "reduce_scatter_tensor"):
                    try:
                        dist.reduce_scatter_tensor(recv, send, op=redop)
                        api["name"] = "reduce_scatter_tensor"
                        return
                    except RuntimeError as e:
                        if not _is_unsupported(e):
                            raise
                        errs.append(str(e).splitlines()[0])
                try:
                    dist.reduce_scatter(recv, ins, op=redop)
                    api["name"] = "reduce_scatter"
                except RuntimeError as e:
                    if not _is_unsupported(e):
                        raise
                    errs.append(str(e).splitlines()[0])
                    raise Unsupported("; ".join(errs))

            def fill():
                send.copy_(pattern(rank, pc * n))
                recv.zero_()

            def wrong():
                return int((recv != reduce_expected(pc, offset=rank * pc)).sum())
            return run, fill, wrong

        raise ValueError(op)

    factor = busbw_factor(op, n)
    sizes = size_sweep(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    if rank == 0:
        print("# gloo_bench: torch %s, np %d, op %s, dtype %s, redop %s, root %d, "
              "warmup %d, iters %d, check %d, 1 torch thread per rank"
              % (torch.__version__, n, op, args.dtype, args.redop if op in REDUCING else "none",
                 root, args.warmup, args.iters, args.check), file=sys.stderr)
        print("# %10s %12s %8s %6s %5s %10s %8s %8s %8s"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"),
              file=sys.stderr)
        print("# %10s %12s %8s %6s %5s %10s %8s %8s %8s"
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""),
              file=sys.stderr)

    for size in sizes:
        pc, nbytes = layout(op, size, elt, n)
        if pc == 0:
            if rank == 0:
                print("# skip %d B: per-rank chunk rounds down to 0 elements" % size,
                      file=sys.stderr)
            continue
        run, fill, wrong = make_case(pc)
        try:
            w0 = time.perf_counter()
            for _ in range(args.warmup):
                run()
            if args.warmup > 0 and args.warmup_ms > 0:
                # While any rank's warm-up is short of its time, as many
                # more as the time left needs at the pace of the last
                # batch, the same number on every rank (agreed per batch),
                # as occl-bench does.
                batch, btook = args.warmup, time.perf_counter() - w0
                while True:
                    left = args.warmup_ms / 1e3 - (time.perf_counter() - w0)
                    more = int(left / max(btook / batch, 1e-9)) + 1 if left > 0 else 0
                    t = torch.tensor([more], dtype=torch.int64)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX)
                    if int(t[0]) == 0:
                        break
                    b0 = time.perf_counter()
                    for _ in range(int(t[0])):
                        run()
                    batch, btook = int(t[0]), time.perf_counter() - b0
            if args.warmup == 0:
                run()  # surface "unsupported" before timing
        except Unsupported as e:
            if rank == 0:
                print("gloo_bench: %s is not supported by the %s backend of torch %s (%s)"
                      % (op, args.backend, torch.__version__, e), file=sys.stderr)
            dist.destroy_process_group()
            return EXIT_UNSUPPORTED

        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            run()
        avg = (time.perf_counter() - t0) / max(1, args.iters)
        t = torch.tensor([avg], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        sec = float(t[0])

        nwrong = -1
        if args.check:
            fill()
            dist.barrier()
            run()
            w = torch.tensor([wrong()], dtype=torch.int64)
            dist.all_reduce(w, op=dist.ReduceOp.SUM)
            nwrong = int(w[0])

        algbw = nbytes / sec / 1e9 if sec > 0 else 0.0
        busbw = algbw * factor
        if rank == 0:
            rec = {
                "impl": "gloo" if args.backend == "gloo" else "occl-torch", "op": op, "np": n, "bytes": nbytes, "count": pc,
                "dtype": args.dtype, "redop": args.redop if op in REDUCING else "none",
                "algo": args.backend, "transport": args.transport if args.backend == "gloo" else "auto",
                "time_us": sig(sec * 1e6),
                "algbw_GBps": sig(algbw), "busbw_GBps": sig(busbw),
                "wrong": nwrong, "iters": args.iters,
            }
            if op == "alltoallv":
                rec["skew"] = "uniform" if args.skew is None else "zipf:%g" % args.skew
            print(json.dumps(rec), flush=True)
            print("  %10d %12d %8s %6s %5s %10.2f %8.3f %8.3f %8s"
                  % (nbytes, pc, args.dtype, rec["redop"],
                     str(root) if op in ("broadcast", "reduce") else "-",
                     sec * 1e6, algbw, busbw, "N/A" if nwrong < 0 else nwrong),
                  file=sys.stderr, flush=True)
        del run, fill, wrong

    if rank == 0 and api["name"]:
        print("# torch.distributed call: %s" % api["name"], file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main():
    argv = sys.argv[1:]
    args = build_parser().parse_args(argv)
    if args.np < 1:
        print("gloo_bench: -np must be >= 1", file=sys.stderr)
        return 2
    if args.iters < 1 or args.warmup < 0:
        print("gloo_bench: need -n >= 1 and -w >= 0", file=sys.stderr)
        return 2
    if args.minbytes > args.maxbytes:
        print("gloo_bench: -b larger than -e", file=sys.stderr)
        return 2
    if args.rank >= 0:
        return run_rank(args)
    try:
        import torch.distributed as dist  # noqa: F401  (availability check only)
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed with Gloo is not available")
    except ImportError as e:
        print("gloo_bench: cannot use torch: %s" % e, file=sys.stderr)
        return 4
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
