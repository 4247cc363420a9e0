#!/usr/bin/python3
"""Run occl-bench, Gloo and Open MPI side by side on this machine, measure the
machine's own limits in the same run, and print the comparison.

One command, from the repository root:

    /usr/bin/python3 bench/peers/compare.py

It builds the programs it needs into a temporary directory

    go build -o <tmp>/occl-bench ./bench/cmd/occl-bench
    go build -o <tmp>/occl-limits ./bench/peers/limits
    mpicc -std=c99 -O2 -o <tmp>/mpi_bench bench/peers/mpi_bench.c -lm

then runs, for every case below, occl-bench over TCP and over shared memory,
gloo_bench.py (torch.distributed, Gloo over loopback TCP), and mpi_bench under
mpirun with the TCP BTL on lo and with the shared-memory BTL (vader).

The cases are the collectives of a mixture-of-experts job, float32:

    alltoall, alltoallv, allgather, reducescatter, broadcast, allreduce
    x 8 B, 1 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB
    x np = 2 and 4

alltoallv is the skewed all-to-all of an MoE dispatch: the elements of the
alltoall of the same size, spread so that every rank sends rank d a share
proportional to 1/(d+1) (-skew zipf:1 in all three programs: MPI_Alltoallv,
all_to_all_single with split sizes, occl-bench -op alltoallv).

"Size" means what it means in nccl-tests, for all three programs: the whole
buffer of a rank (the alltoall send buffer, the allgather output, the
reducescatter input; the one buffer of broadcast and allreduce; alltoallv's
alltoall's). gloo_bench.py and mpi_bench.c round the per-rank chunk of
allgather, reducescatter, alltoall and alltoallv down to 16 bytes and skip a size whose chunk is empty ("per-rank
chunk rounds down to 0 elements"); occl-bench would run 0 elements. So for
those four operations the smallest point is 16 B x np instead of 8 B (32 B at
np=2, 64 B at np=4), marked * in the table. torch 1.13's Gloo has no
reduce_scatter: gloo_bench.py exits with status 3 and the column stays empty
(the script does not run it again in later rounds).

All three time blocking calls one after the other, as a training loop
that waits for each operation makes them: occl-bench -z 1 (the blocking
forms of the Go API), MPI_Allreduce and friends in mpi_bench.c, and
torch.distributed calls without async_op in gloo_bench.py.

Each op and np runs as three commands, one per band of sizes, with
iterations (warmup) scaled to the size:

    8 B (or 16 B x np), 1 KiB    50000 (5000), Gloo 5000 (500)
    64 KiB, 1 MiB                  300 (30)
    16 MiB, 64 MiB                  16 (4)

(every warm-up lasting at least 20 ms, in all three programs), and every
command runs --repeat 3 rounds. Rounds are interleaved: round 1 of
every case, then round 2, ...; within a case the five implementations run
back to back, in an order that changes from round to round, so a noisy
moment of the machine hits all columns of a point alike. The orders are the
rows of a Williams design: over as many rounds as there are columns (twice
as many for an odd number, 10 for these five) every column runs once at
every position and right after every other column equally often. (An order
that only rotated kept every column's neighbours: in a 7-round run of one
occl-bench against itself, the copy that always ran right after mpi-shm was
the slower over TCP in 101 of 168 paired rounds;
bench/results/compare-20261201-aa7.jsonl.) The tables show the
median of the rounds.

Duration: about 24 minutes for the default run on 2 cores, measured: the
commands of bench/results/compare-20261130-lend.jsonl (six operations, 3
rounds) took 1373 s, gloo 846 of them (most of it starting torch in every
rank), occl-tcp 175, occl-shm 143, mpi-tcp 125, mpi-shm 84, plus the builds.
--ops and --np run a subset:

    /usr/bin/python3 bench/peers/compare.py --ops alltoall,allgather --np 4

--hugepages gives every implementation the buffers a program tuned for it
would use: occl-bench -hugepages allocates from occl's allocator
(hugemem: from 64 KiB memory files the peers map, so that a lent block is
copied with memcpy, from 2 MiB advised for huge pages), and
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 puts mpi_bench's buffers (passed by
mpirun -x) and torch's tensors in gloo_bench.py in transparent huge pages
(both allocate with glibc's malloc, which then advises what it maps), so
that a process_vm_readv pins one page per 2 MiB. Single-copy transfers
gain the most; the header of the tables says when a run had them, and
with which policy for huge pages in shared memory
(/sys/kernel/mm/transparent_hugepage/shmem_enabled, recorded as
shmem_thp): occl's shared buffers have huge pages only where it is not
"never" or "deny".

--latency times every operation of occl-bench's and mpi_bench's runs
(-latency in both: one clock reading after each call) and adds a table of
the per-operation median and 99th percentile at the grid's points up to
1 KiB. A run's mean at those sizes moves with a few milliseconds the
machine takes a core away during it (this one did, in some hours, a stall
of about 4 ms in most runs of 10 ms, to every implementation alike: see
"Slow runs at the smallest sizes" in docs/performance.md); the median of
the calls does not. With --baseline, the baseline build runs with
-latency too, so that both are timed alike: it must have the flag.

--quick runs every case with 1-5 iterations and one round (a smoke test,
about 4 minutes). --legacy runs the earlier AllReduce-centred set instead:

    allreduce   float32   8 B .. 64 MiB   np=2   (sweep, factor 2)
    allreduce   float32   64 MiB          np=4
    alltoall    float32   16 MiB          np=4
    allreduce   float32   8 B             np=2   (latency, many iterations)

Every JSON line any of them prints is written, with the case and the run it
came from added, to bench/results/compare-<date>.jsonl (or --out), together
with one "meta" line describing the machine and one "run" line per command
(its argv, exit code and duration). The tables can be printed again from such
a file without running anything:

    /usr/bin/python3 bench/peers/compare.py --table bench/results/compare-....jsonl [--markdown]

The grid's table has, per point (op, np, bytes), the median time of the five
columns and these ratios, time(peer) / time(occl), above 1 meaning occl is
faster: occl-shm against the fastest of the other four columns (named),
occl-shm/mpi-shm, occl-tcp/mpi-tcp, and for alltoall and alltoallv
occl-tcp/gloo. At the
smallest size of each op and np it shows the spread of occl-shm and mpi-shm
over the rounds (max/min time). Below the table, the worst point of every
ratio, and for every ratio the points where occl was slower than that peer
in every round (paired by round: the records carry it), with the number of
such points two equally fast columns would give by chance alone (a point
of n rounds loses all of them with probability 1/2^n): with 3 rounds that is
one point in 8, with 7 one in 128, which is what more rounds buy on a
noisy machine. Files of the legacy set print their bus bandwidth tables as
before.

--baseline BIN runs a second occl-bench, built from another commit, as two
more columns, base-tcp and base-shm, in the same rounds as the others, and
adds the ratios occl-shm/base-shm and occl-tcp/base-tcp (above 1 this build
is faster) with their worst points: a regression check of every point
measured in one run. Given the same binary as the one under test, the two
ratios are an A/A comparison, which shows how far apart one build lands from
itself in a run of this many rounds on this machine, the margin any other
ratio of the table needs before it means something. The two columns cost
what occl's do: bench/results/compare-20261201-aa.jsonl (AllReduce and
AllToAll, 3 rounds) ran 744 s of commands, 142 of them the baseline's.

    go build -o /tmp/occl-bench-old ./bench/cmd/occl-bench   # at the older commit
    /usr/bin/python3 bench/peers/compare.py --ops allreduce,alltoall --baseline /tmp/occl-bench-old

Each "run" line also carries other_cpu_s, the CPU time that other processes
used while the command ran; the script warns when it is large, because on a
small machine anything else running distorts every number. --wait-idle N
waits up to N seconds for an idle machine before each command.

--steady N waits, before each command, up to N seconds for the machine to
pass a cache line between two processes within 2x of the median exchange
of the run so far (the limits run's and the last probe before each earlier
command; bench/peers/limits -only line, a few tens of milliseconds). On a
virtual machine whose host now and then moves the two cores apart, a
2-process call of a few bytes slows down severalfold for seconds or
minutes, and calls of a MiB by up to 60%, and a command that lands in
such a spell measures the host. Each command's run line records the
exchange seen before it (line_exchange_us), how long it waited
(steady_wait_s) and whether the machine was steady; the limits run, when
not skipped, gives the first exchange.

A peer that is missing (torch not importable, no mpirun/mpicc, occl-bench not
building, a transport that occl-bench does not offer) gets a clear message and
empty columns; nothing is ever filled in. Only the Python standard library is
used, except for --plot.

--plot FILE.svg also draws bus bandwidth (GB/s) against message size, both
axes logarithmic, one panel per operation and process count present, one
line per column (occl-shm, occl-tcp, gloo, mpi-shm, mpi-tcp; the median of
every record of a point, rounds and repeated cases alike), from the records
of this run or, with --table, of a saved file (legacy and grid records):

    /usr/bin/python3 bench/peers/compare.py --table bench/results/compare-....jsonl --plot FILE.svg

It needs matplotlib (Debian: apt-get install python3-matplotlib), imported
only for --plot. The SVG keeps its text as text and is reproducible: the
same records and matplotlib version give the same bytes. In it, each line
is a group with id series-<op>-np<np>-<column> and each panel is titled
"<op>, np=<np>".
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Columns of the comparison, in order.
IMPLS = ("occl-tcp", "occl-shm", "gloo", "mpi-tcp", "mpi-shm")

# Columns of the second occl-bench that --baseline runs, shown only where a
# run has them.
BASE_IMPLS = ("base-tcp", "base-shm")


class Case:
    """One benchmark configuration, run by every implementation."""

    def __init__(self, name, group, op, np, b, e, f, n, w, gloo_n=None, gloo_w=None):
        self.name, self.group = name, group
        self.op, self.np = op, np
        self.b, self.e, self.f, self.n, self.w = b, e, f, n, w
        # Gloo's calls and warm-up, where they differ from the others'.
        self.gloo_n = n if gloo_n is None else gloo_n
        self.gloo_w = w if gloo_w is None else gloo_w

    def sweep_args(self, gloo=False):
        n, w = (self.gloo_n, self.gloo_w) if gloo else (self.n, self.w)
        args = ["-op", self.op, "-b", self.b, "-e", self.e, "-f", str(self.f),
                "-n", str(n), "-w", str(w), "-d", "float32"]
        if self.op == "alltoallv":
            args += ["-skew", GRID_SKEW]
        return args

    def describe(self):
        size = self.b if self.b == self.e else "%s..%s" % (self.b, self.e)
        d = "%s np=%d %s n=%d w=%d" % (self.op, self.np, size, self.n, self.w)
        if (self.gloo_n, self.gloo_w) != (self.n, self.w):
            d += " (gloo n=%d w=%d)" % (self.gloo_n, self.gloo_w)
        return d


# The grid: every collective an MoE layer uses, at the sizes it uses them,
# on 2 and 4 processes.
GRID_OPS = ("alltoall", "alltoallv", "allgather", "reducescatter", "broadcast", "allreduce")
GRID_SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
GRID_NP = (2, 4)

# Operations whose size is the whole buffer of np per-rank chunks.
SPLIT_OPS = ("allgather", "reducescatter", "alltoall", "alltoallv")

# The demand of the grid's alltoallv: every rank sends rank d a share
# proportional to 1/(d+1) of the alltoall of the same size (the experts of
# the first ranks the most popular, as an MoE gate makes them: at 4
# processes rank 0 receives 48% of all the bytes). All three benchmarks
# spread it alike (occl-bench's Demand.Counts).
GRID_SKEW = "zipf:1"

# Sizes run by one command share its iteration counts: (first grid size,
# last grid size, iterations, warmup, quick iterations, quick warmup,
# Gloo's iterations and warmup, None for the same).
# Every timed run lasts milliseconds at least, so that one descheduling or
# one slow phase of the machine does not decide a median: 300 calls of
# 45 us (64 KiB at 4 processes) take 13.5 ms. The smallest band's calls
# last 0.4-1 us on shared memory at 2 processes: 5000 of them (2-5 ms)
# moved the 8 B AllReduce by 0.85x-1.1x against vader from one grid to the
# next with the same code, so occl and Open MPI run 50000 (20-50 ms; 2 s
# over TCP at 4 processes); Gloo, whose small calls take 150-250 us, keeps
# 5000 (1 s). At 16 and 64 MiB, 8 calls after 2 of warm-up let one slow
# moment move a median by a fifth (16 MiB AllToAll at 4 processes: 4.5-4.7
# ms with those counts, 4.0-4.3 with 50 after 5): 16 after 4.
GRID_BANDS = (
    (8, 1 << 10, 50000, 5000, 5, 1, 5000, 500),
    (64 << 10, 1 << 20, 300, 30, 3, 1, None, None),
    (16 << 20, 64 << 20, 16, 4, 1, 1, None, None),
)


def smallest_size(op, np):
    """The smallest size at or above 8 bytes that every implementation can
    run. gloo_bench.py and mpi_bench.c follow nccl-tests and round the
    per-rank chunk of allgather, reducescatter and alltoall down to a
    multiple of 16 bytes of elements, skipping a size whose chunk becomes 0;
    occl-bench does not round but runs 0 elements. So these operations need
    16 bytes per rank, whatever the data type: 32 B at np=2, 64 B at np=4."""
    if op in SPLIT_OPS:
        return max(GRID_SIZES[0], 16 * np)
    return GRID_SIZES[0]


def grid_cases(quick, ops=GRID_OPS, nps=GRID_NP):
    """The default set: for every op and np, one command per band of sizes,
    iterations scaled to the size."""
    cases = []
    for np in nps:
        for op in ops:
            for lo, hi, n, w, qn, qw, gn, gw in GRID_BANDS:
                b = smallest_size(op, np) if lo == GRID_SIZES[0] else lo
                if quick:
                    n, w, gn, gw = qn, qw, None, None
                cases.append(Case("grid-%s-np%d-%s" % (op, np, fmt_bytes(b)), "grid", op, np,
                                  str(b), str(hi), hi // b, n, w, gn, gw))
    return cases


def legacy_cases(quick):
    """The set run before the grid (AllReduce sweeps, 64 MiB AllReduce and
    16 MiB AllToAll at np=4); --legacy runs it, for the README's snapshot."""
    if quick:
        return [
            Case("allreduce-np2-small", "allreduce np=2 sweep", "allreduce", 2, "8", "64K", 8, 10, 2),
            Case("allreduce-np2-large", "allreduce np=2 sweep", "allreduce", 2, "1M", "4M", 4, 3, 1),
            Case("allreduce-64M-np4", "allreduce 64MiB np=4", "allreduce", 4, "64M", "64M", 2, 2, 1),
            Case("alltoall-16M-np4", "alltoall 16MiB np=4", "alltoall", 4, "16M", "16M", 2, 2, 1),
            Case("allreduce-8B-np2", "allreduce 8B np=2 latency", "allreduce", 2, "8", "8", 2, 100, 10),
        ]
    return [
        Case("allreduce-np2-small", "allreduce np=2 sweep", "allreduce", 2, "8", "1M", 2, 50, 10),
        Case("allreduce-np2-large", "allreduce np=2 sweep", "allreduce", 2, "2M", "64M", 2, 10, 3),
        Case("allreduce-64M-np4", "allreduce 64MiB np=4", "allreduce", 4, "64M", "64M", 2, 5, 2),
        Case("alltoall-16M-np4", "alltoall 16MiB np=4", "alltoall", 4, "16M", "16M", 2, 5, 2),
        Case("allreduce-8B-np2", "allreduce 8B np=2 latency", "allreduce", 2, "8", "8", 2, 2000, 200),
    ]


def loadavg():
    """The 1-minute load average, or None where /proc is missing."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def busy_seconds():
    """CPU seconds all processes of the machine have run since boot (user,
    nice and system time from /proc/stat), or None where /proc is missing.
    Interrupt and softirq time are left out: loopback TCP traffic is
    processed there and would otherwise be counted as someone else's work."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        user, nice, system = (int(x) for x in fields[:3])
        return (user + nice + system) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None


def wait_idle(max_wait):
    """Waits up to max_wait seconds for the machine to be idle (less than a
    tenth of a CPU busy over one second). Returns True if it is."""
    deadline = time.monotonic() + max_wait
    said = False
    while True:
        b0 = busy_seconds()
        time.sleep(1.0)
        b1 = busy_seconds()
        if b0 is None or b1 is None or b1 - b0 < 0.1:
            return True
        if time.monotonic() >= deadline:
            log("compare:          machine still busy (%.1f CPUs) after waiting %.0f s; running anyway"
                % (b1 - b0, max_wait))
            return False
        if not said:
            log("compare:          machine busy (%.1f CPUs in use), waiting up to %.0f s"
                % (b1 - b0, max_wait))
            said = True


# --steady: a command runs once the machine passes a cache line between two
# processes (limits -only line, STEADY_ITERS rounds of its exchange) within
# STEADY_RATIO of the median exchange of the run so far: the limits run's,
# and the last probe before each earlier command (see Steady.wait). Where
# the host moves the two virtual cores apart, a 2-process call of a few
# bytes slows down severalfold for seconds or minutes, and one of a MiB by
# up to 60% (bench/results/spells-20261204-epyc-sizes.txt); a command that
# lands in such a spell measures the host, not the implementation. The median, not
# the fastest: the host also, more rarely, puts the two cores closer than
# usual (an exchange of half the usual time), which is no reason to wait.
STEADY_RATIO = 2.0
STEADY_ITERS = 100000


class Steady:
    """Waits, before a command, for the machine's line exchange to be
    within STEADY_RATIO of the median exchange seen (see --steady). probe
    returns the exchange in us, or None if it cannot be measured."""

    def __init__(self, probe, max_wait, sleep=time.sleep, clock=time.monotonic):
        self.probe, self.max_wait = probe, max_wait
        self.sleep, self.clock = sleep, clock
        self.exchanges = []

    def seen(self, us):
        """Takes in an exchange measured elsewhere (the limits run)."""
        if us is not None:
            self.exchanges.append(us)

    def typical(self):
        """The median of the exchanges seen, None before the first."""
        if not self.exchanges:
            return None
        v = sorted(self.exchanges)
        mid = len(v) // 2
        return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2

    def wait(self):
        """Probes until the exchange is within STEADY_RATIO of the median
        of those seen before the wait (any exchange, if none was), or
        max_wait seconds have passed. Only the last probe joins them: the
        probes of a slow spell waited out would otherwise drag the median
        into it. Returns the last exchange measured (None if the probe
        failed), the seconds waited, and whether the machine was steady."""
        start, ref = self.clock(), self.typical()
        while True:
            us = self.probe()
            waited = round(self.clock() - start, 2)
            if us is None:
                return None, waited, False
            steady = ref is None or us <= STEADY_RATIO * ref
            if steady or waited >= self.max_wait:
                self.seen(us)
                return us, waited, steady
            self.sleep(1.0)


def steady_for(seconds, limits):
    """The Steady that --steady SECONDS waits with, probing with the limits
    binary; None without --steady, or if limits did not build."""
    if seconds <= 0:
        return None
    if not limits:
        log("compare: --steady needs bench/peers/limits, which did not build; not waiting")
        return None
    return Steady(lambda: line_probe(limits), seconds)


def line_probe(limits):
    """The probe of Steady: limits' shared-memory line exchange, in us."""
    try:
        p = subprocess.run([limits, "-only", "line", "-line-iters", str(STEADY_ITERS)],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for r in parse_json_lines(p.stdout):
        if r.get("what") == "shm_line_exchange":
            return r.get("us")
    return None


def children_seconds():
    """CPU seconds used by this script's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def tail(text, lines=6):
    t = [l for l in (text or "").strip().splitlines() if l.strip()]
    return "\n".join("    " + l for l in t[-lines:])


# ------------------------------------------------------------------ tools --

class Tools:
    """Locates or builds each program; a missing one has a reason instead."""

    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.occl = self.base = self.limits = self.mpi = self.mpirun = None
        self.gloo_ok = False
        self.torch_version = None
        self.missing = {}  # peer -> reason

    def prepare(self, skip):
        if "occl" not in skip:
            self.occl = self._go_build("occl", "./bench/cmd/occl-bench", "occl-bench", self.args.occl_bin)
            if self.args.baseline:
                self.base = self._given("baseline", self.args.baseline)
        elif self.args.baseline:
            self.missing["baseline"] = "--skip occl leaves it out as well"
        if "limits" not in skip or self.args.steady > 0:
            self.limits = self._go_build("limits", "./bench/peers/limits", "occl-limits", None)
        if "gloo" not in skip:
            self._check_gloo()
        if "mpi" not in skip:
            self._build_mpi()
        for peer, why in self.missing.items():
            log("compare: %s unavailable: %s; its columns stay empty" % (peer, why))

    def _given(self, peer, path):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        self.missing[peer] = "%s is not an executable file" % path
        return None

    def _go_build(self, peer, pkg, name, given):
        if given:
            return self._given(peer, given)
        if not shutil.which("go"):
            self.missing[peer] = "the go command is not on PATH"
            return None
        out = os.path.join(self.tmp, name)
        log("compare: go build -o %s %s" % (out, pkg))
        p = subprocess.run(["go", "build", "-o", out, pkg], cwd=ROOT,
                           capture_output=True, text=True)
        if p.returncode != 0:
            self.missing[peer] = "go build %s failed:\n%s" % (pkg, tail(p.stderr))
            return None
        return out

    def _check_gloo(self):
        py = self.args.python
        probe = ("import torch, torch.distributed as d; "
                 "assert d.is_available() and d.is_gloo_available(), 'no Gloo backend'; "
                 "print(torch.__version__)")
        try:
            p = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.missing["gloo"] = "cannot run %s: %s" % (py, e)
            return
        if p.returncode != 0:
            self.missing["gloo"] = "torch.distributed with Gloo is not importable by %s:\n%s" % (
                py, tail(p.stderr, 2))
            return
        self.gloo_ok = True
        self.torch_version = p.stdout.strip()

    def _build_mpi(self):
        self.mpirun = shutil.which("mpirun")
        mpicc = shutil.which("mpicc")
        if not self.mpirun or not mpicc:
            self.missing["mpi"] = "mpirun or mpicc not found (install openmpi-bin, libopenmpi-dev)"
            self.mpirun = None
            return
        out = os.path.join(self.tmp, "mpi_bench")
        cmd = [mpicc, "-std=c99", "-O2", "-o", out, os.path.join(HERE, "mpi_bench.c"), "-lm"]
        log("compare: " + " ".join(cmd))
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            self.missing["mpi"] = "mpicc failed:\n%s" % tail(p.stderr)
            self.mpirun = None
            return
        self.mpi = out


def commands(case, tools, args):
    """(run label, argv) for every implementation of one case."""
    out = []
    check = ["-c", "1"] if args.check else ["-c", "0"]
    for label, binary in (("occl", tools.occl), ("base", tools.base)):
        if not binary:
            continue
        for t in ("tcp", "shm"):
            argv = [binary, "-np", str(case.np)] + case.sweep_args() + ["-transport", t, "-z", "1", "-json"]
            if not args.check:
                argv += ["-c", "0"]
            if args.hugepages:
                argv += ["-hugepages"]
            if args.latency:
                argv += ["-latency"]
            out.append((label + "-" + t, argv))
    if tools.gloo_ok:
        out.append(("gloo", [args.python, os.path.join(HERE, "gloo_bench.py"), "-np", str(case.np)]
                    + case.sweep_args(gloo=True) + check))
    if tools.mpi:
        base = [tools.mpirun]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            base.append("--allow-run-as-root")
        base += ["--oversubscribe", "-np", str(case.np),
                 "--mca", "pml", "ob1", "--mca", "oob_tcp_if_include", "lo"]
        if args.hugepages:
            base += ["-x", "GLIBC_TUNABLES=" + huge_tunables()]
        btls = {
            "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
            "shm": ["--mca", "btl", "self,vader"],
        }
        lat = ["-latency"] if args.latency else []
        for t in ("tcp", "shm"):
            out.append(("mpi-" + t, base + btls[t] + [tools.mpi] + case.sweep_args()
                        + check + ["-transport", t] + lat))
    return out


def round_order(n, r):
    """The order in which round r (from 0) runs the n commands of a case:
    row r of a Williams design, a Latin square balanced for what ran just
    before. Over n rounds (2n when n is odd, the second n reversed) every
    command runs once at every position, and right after every other
    command equally often, so that a command that slows or speeds up the
    next one (seen, not explained: see the module's docstring) does not
    always fall on the same column. Row 0 is 0, 1, n-1, 2, n-2, ...;
    row r adds r to every entry, modulo n."""
    row, lo, hi = [0], 1, n - 1
    while len(row) < n:
        row.append(lo)
        lo += 1
        if len(row) < n:
            row.append(hi)
            hi -= 1
    if n % 2 == 1 and (r // n) % 2 == 1:
        row.reverse()
    return [(x + r) % n for x in row]


def parse_json_lines(text):
    recs = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return recs


def run_one(label, argv, timeout, verbose):
    """Runs one command; returns (records, rc, seconds, stderr, other_cpu).
    other_cpu is an estimate of the CPU seconds that processes other than the
    command spent during its run: other work on the machine distorts the
    measurement, and this makes it visible."""
    busy0, child0 = busy_seconds(), children_seconds()
    t0 = time.monotonic()
    try:
        # A session of its own, so that on a timeout the launcher and every
        # rank it started are killed together.
        p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        try:
            so, se = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            so, se = p.communicate()
            rc = 124
            se = (se or "") + "\ntimed out after %.0f s" % timeout
    except OSError as e:
        rc, so, se = 127, "", str(e)
    if verbose and se:
        sys.stderr.write(se)
    secs = time.monotonic() - t0
    busy1, child1 = busy_seconds(), children_seconds()
    other = None
    if busy0 is not None and busy1 is not None:
        other = max(0.0, (busy1 - busy0) - (child1 - child0))
    return parse_json_lines(so), rc, secs, se, other


def rnd(x):
    return None if x is None else round(x, 2)


def warn_if_busy(label, secs, other):
    """Warns when other processes used more than a fifth of a CPU on average
    while a benchmark ran."""
    if other is not None and secs > 0.5 and other / secs > 0.2:
        log("compare:          warning: other processes used %.1f CPU-s during this %.1f s run; "
            "its numbers are disturbed" % (other, secs))


# HUGE_MALLOC makes glibc's malloc advise the memory it maps for
# transparent huge pages (glibc 2.35 and later): what --hugepages gives
# mpi_bench's buffers and torch's tensors in gloo_bench.py.
HUGE_MALLOC = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"


def huge_tunables():
    """GLIBC_TUNABLES with HUGE_MALLOC's tunable added to any already set."""
    ours = HUGE_MALLOC.split("=", 1)[1]
    have = os.environ.get("GLIBC_TUNABLES", "")
    return have + ":" + ours if have and ours not in have.split(":") else (have or ours)


# Linux's policy for transparent huge pages in shared memory: it decides
# whether occl-bench -hugepages' shared buffers from 2 MiB (hugemem) have
# huge pages ("never", a common default, keeps them on 4 KiB pages;
# "advise" gives them to the mappings that ask, as occl's do).
SHMEM_THP = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"


def shmem_thp():
    """The policy in force in SHMEM_THP (the choice in brackets), or None
    where the file cannot be read or shows none."""
    try:
        with open(SHMEM_THP) as f:
            text = f.read()
    except OSError:
        return None
    for word in text.split():
        if len(word) > 2 and word[0] == "[" and word[-1] == "]":
            return word[1:-1]
    return None


def machine_meta(tools):
    meta = {
        "impl": "meta",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    if tools.torch_version:
        meta["torch"] = tools.torch_version
    if tools.mpirun:
        try:
            v = subprocess.run([tools.mpirun, "--version"], capture_output=True, text=True, timeout=30)
            meta["mpi"] = (v.stdout.strip().splitlines() or [""])[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    meta["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        v = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                           capture_output=True, text=True, timeout=30)
        if v.returncode == 0:
            meta["occl_commit"] = v.stdout.strip()
    except OSError:
        pass
    return meta


def select_cases(args):
    """The cases of this run: the grid (or the legacy set) filtered by --ops
    and --np."""
    ops = [o for o in args.ops.split(",") if o] if args.ops else list(GRID_OPS)
    nps = [int(n) for n in args.np.split(",") if n] if args.np else list(GRID_NP)
    if args.legacy:
        cases = legacy_cases(args.quick)
    else:
        cases = grid_cases(args.quick, [o for o in GRID_OPS if o in ops], nps)
    cases = [c for c in cases if c.op in ops and c.np in nps]
    if not cases:
        raise SystemExit("compare: no case left after --ops %s --np %s" % (args.ops, args.np))
    return cases


def run_all(args):
    skip = set(s for s in args.skip.split(",") if s)
    cases = select_cases(args)
    out_path = args.out or os.path.join(
        ROOT, "bench", "results",
        "compare-%s.jsonl" % datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)

    if args.hugepages:
        # For gloo_bench.py's torch, which allocates its tensors with
        # glibc's malloc (mpirun passes it on with -x as well).
        os.environ["GLIBC_TUNABLES"] = huge_tunables()
    records = []
    with tempfile.TemporaryDirectory(prefix="occl-compare-") as tmp, open(out_path, "w") as out:
        tools = Tools(args, tmp)
        tools.prepare(skip)

        def write(rec):
            if "argv" in rec:
                # Record commands with the build directory abstracted away.
                rec["argv"] = [a.replace(tmp, "<tmp>") for a in rec["argv"]]
            records.append(rec)
            out.write(json.dumps(rec) + "\n")
            out.flush()

        meta = machine_meta(tools)
        meta["hugepages"] = args.hugepages
        meta["shmem_thp"] = shmem_thp()
        meta["load1"] = loadavg()
        b0 = busy_seconds()
        time.sleep(1.0)
        b1 = busy_seconds()
        meta["busy_cpus_at_start"] = None if b0 is None or b1 is None else round(b1 - b0, 2)
        write(meta)
        if (meta["busy_cpus_at_start"] or 0) > 0.2:
            log("compare: warning: %.1f CPUs busy with other work before starting; it will "
                "distort the numbers (see --wait-idle)" % meta["busy_cpus_at_start"])

        steady = steady_for(args.steady, tools.limits)
        if tools.limits and "limits" not in skip:
            log("compare: measuring the machine's limits")
            if args.wait_idle > 0:
                wait_idle(args.wait_idle)
            recs, rc, secs, err, other = run_one("limits", [tools.limits], args.timeout, args.verbose)
            write({"impl": "run", "case": "limits", "run": "limit", "argv": [tools.limits],
                   "rc": rc, "seconds": round(secs, 2), "other_cpu_s": rnd(other)})
            warn_if_busy("limits", secs, other)
            if rc != 0:
                log("compare: limits failed (exit %d):\n%s" % (rc, tail(err)))
            for r in recs:
                r.update(case="limits", run="limit")
                write(r)
                if steady and r.get("what") == "shm_line_exchange":
                    steady.seen(r.get("us"))

        # Rounds run every command once each, interleaved, so that a slow
        # spell of the machine hits every implementation alike; the tables
        # report the median over rounds.
        # Within a case the order of the implementations changes from
        # round to round (round_order), so that none always runs first
        # (after a heavy command of the previous case), last, or right
        # after the same other one.
        plan = []
        for rnd_i in range(args.repeat):
            for c in cases:
                cmds = commands(c, tools, args)
                plan += [(rnd_i + 1, c) + cmds[j] for j in round_order(len(cmds), rnd_i)]
        unsupported = set()  # (run label, op) that exited with status 3
        for i, (round_no, case, label, argv) in enumerate(plan, 1):
            if (label, case.op) in unsupported:
                continue
            log("compare: [%d/%d] %-8s %s" % (i, len(plan), label, case.describe()))
            if args.wait_idle > 0:
                wait_idle(args.wait_idle)
            line = {}
            if steady:
                us, waited, ok = steady.wait()
                line = {"line_exchange_us": us, "steady_wait_s": waited, "steady": ok}
                if not ok:
                    log("compare:          line exchange %s us, median seen %s us, after waiting %.0f s; "
                        "running anyway" % (fmt_num(us, 3), fmt_num(steady.typical(), 3), waited))
            recs, rc, secs, err, other = run_one(label, argv, args.timeout, args.verbose)
            write(dict({"impl": "run", "case": case.name, "group": case.group, "run": label, "round": round_no,
                        "argv": argv, "rc": rc, "seconds": round(secs, 2), "other_cpu_s": rnd(other)}, **line))
            warn_if_busy(label, secs, other)
            want_transport = label.split("-", 1)[1] if "-" in label else "tcp"
            for r in recs:
                if label.startswith(("occl", "base")) and r.get("transport") not in (None, want_transport):
                    log("compare: warning: %s asked for transport %s but reports %r"
                        % (label, want_transport, r.get("transport")))
                r.update(case=case.name, group=case.group, run=label, round=round_no)
                write(r)
            if rc == 3 and label == "gloo":
                unsupported.add((label, case.op))
                log("compare:          gloo does not support %s in this torch; column left empty, "
                    "not run again\n%s"
                    % (case.op, tail(err, 2)))
            elif rc != 0:
                log("compare:          %s failed (exit %d) after %d rows; the rest stays empty:\n%s"
                    % (label, rc, len(recs), tail(err)))
            else:
                log("compare:          ok, %d rows, %.1f s" % (len(recs), secs))

    log("compare: wrote %s" % out_path)
    return records, out_path


# ----------------------------------------------------------------- tables --

def median_record(rs):
    """One record whose numbers are the medians of rs (wrong: the maximum)."""
    out = dict(rs[-1])
    for k in ("time_us", "busbw_GBps", "algbw_GBps", "inplace_time_us", "inplace_busbw_GBps"):
        vals = sorted(r[k] for r in rs if isinstance(r.get(k), (int, float)))
        if vals:
            mid = len(vals) // 2
            out[k] = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    wrongs = [r.get("wrong") for r in rs if isinstance(r.get("wrong"), (int, float))]
    if wrongs:
        out["wrong"] = max(wrongs)
    out["rounds"] = len(rs)
    return out


def load_records(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return recs


def column_of(rec):
    """Which comparison column a measurement belongs to."""
    if rec.get("run") in IMPLS + BASE_IMPLS:
        return rec["run"]
    impl, t = rec.get("impl"), rec.get("transport")
    if impl == "gloo":
        return "gloo"
    if impl == "occl":
        return "occl-" + (t or "tcp")
    if impl in ("openmpi", "mpi"):
        return "mpi-" + (t or "tcp")
    return None


def fmt_num(x, width=9):
    if x is None:
        return "-".rjust(width)
    if x == 0:
        s = "0"
    elif abs(x) >= 1000:
        s = "%.0f" % x
    elif abs(x) >= 10:
        s = "%.1f" % x
    elif abs(x) >= 0.01:
        s = "%.3f" % x
    else:
        s = "%.2e" % x
    return s.rjust(width)


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return "%.2fx" % (a / b)


def fmt_pct(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return "%.0f%%" % (100.0 * a / b)


def fmt_bytes(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return "%dB" % n


def render(headers, rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(headers) + " |",
                 "|" + "|".join("---:" for _ in headers) + "|"]
        lines += ["| " + " | ".join(c.strip() for c in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i].strip()) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    fmt = "  ".join("%%%ds" % w for w in widths)
    lines = [fmt % tuple(headers), "  ".join("-" * w for w in widths)]
    lines += [fmt % tuple(c.strip() for c in r) for r in rows]
    return "\n".join(lines)


# The ratios of the grid table: (header, occl column, peer columns,
# operations it applies to or None for all). A ratio is time(peer) /
# time(occl): above 1 occl is faster. With several peer columns the fastest
# of them is taken.
GRID_RATIOS = (
    ("occl-shm/best", "occl-shm", ("occl-tcp", "gloo", "mpi-tcp", "mpi-shm"), None),
    ("occl-shm/mpi-shm", "occl-shm", ("mpi-shm",), None),
    ("occl-tcp/mpi-tcp", "occl-tcp", ("mpi-tcp",), None),
    ("occl-tcp/gloo", "occl-tcp", ("gloo",), ("alltoall", "alltoallv")),
)

# The ratios of this build against the --baseline build, shown only where
# the records have its columns.
BASE_RATIOS = (
    ("occl-shm/base-shm", "occl-shm", ("base-shm",), None),
    ("occl-tcp/base-tcp", "occl-tcp", ("base-tcp",), None),
)

# Operations whose peers exist only in place (MPI_Bcast, torch's
# broadcast): the grid compares occl's in-place time there (occl-bench
# times both forms; out of place, the root copies its source too).
IN_PLACE_OPS = ("broadcast",)

# Columns whose spread over rounds (max/min time) is shown at the smallest size.
SPREAD_COLS = ("occl-shm", "mpi-shm")


def grid_layout(columns):
    """(columns, ratios, spread columns) of a grid table whose points have
    the given columns: the baseline's columns, ratios and spread join the
    others where any point has a baseline column."""
    if any(c in BASE_IMPLS for c in columns):
        return IMPLS + BASE_IMPLS, GRID_RATIOS + BASE_RATIOS, SPREAD_COLS + ("base-shm",)
    return IMPLS, GRID_RATIOS, SPREAD_COLS


def grid_points(records):
    """{(op, np, bytes): {column: [time_us of each round]}} of grid records."""
    points = {}
    for r in records:
        if r.get("impl") in ("meta", "run", "limit") or not isinstance(r.get("time_us"), (int, float)):
            continue
        col = column_of(r)
        if col not in IMPLS + BASE_IMPLS:
            continue
        if r.get("op") in IN_PLACE_OPS and col.startswith(("occl", "base")) and isinstance(r.get("inplace_time_us"), (int, float)) \
                and r["inplace_time_us"] > 0:
            r = dict(r, time_us=r["inplace_time_us"])
        key = (r.get("op"), r.get("np"), r.get("bytes"))
        points.setdefault(key, {}).setdefault(col, []).append(r)
    return points


def median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def grid_rows(records):
    """The grid table's rows as data: a list of dicts with op, np, bytes,
    time (column -> median time_us), ratio (header -> (value, peer column)),
    slower (header -> rounds_slower of occl's column against that peer),
    spread (column -> max/min over rounds, at the smallest size of each op
    and np only), rounds and wrong (columns with a wrong result)."""
    points = grid_points(records)
    _, ratios, spread_cols = grid_layout({c for cells in points.values() for c in cells})
    smallest = {}
    for op, np, b in points:
        smallest[(op, np)] = min(b, smallest.get((op, np), b))
    order = {op: i for i, op in enumerate(GRID_OPS)}
    rows = []
    for key in sorted(points, key=lambda k: (k[1], order.get(k[0], len(order)), k[0], k[2])):
        op, np, b = key
        cells = points[key]
        time = {c: median([r["time_us"] for r in rs]) for c, rs in cells.items()}
        ratio, slower = {}, {}
        for name, mine, peers, ops in ratios:
            if ops is not None and op not in ops:
                continue
            have = [(time[p], p) for p in peers if time.get(p)]
            if not time.get(mine) or not have:
                ratio[name] = (None, None)
                continue
            t, peer = min(have)
            ratio[name] = (t / time[mine], peer)
            slower[name] = rounds_slower(cells[mine], cells[peer])
        spread = {}
        if b == smallest[(op, np)]:
            for c in spread_cols:
                ts = [r["time_us"] for r in cells.get(c, [])]
                if len(ts) > 1 and min(ts) > 0:
                    spread[c] = max(ts) / min(ts)
        rows.append({
            "op": op, "np": np, "bytes": b, "time": time, "ratio": ratio, "slower": slower, "spread": spread,
            "rounds": max(len(rs) for rs in cells.values()),
            "wrong": sorted(c for c, rs in cells.items()
                            if any((r.get("wrong") or 0) > 0 for r in rs)),
        })
    return rows


def rounds_slower(mine, peer):
    """(k, n): in how many of the n rounds both columns ran the time of mine
    was above the peer's in the same round (a round runs every column of a
    point back to back). Records carry their round; in files written
    before they did, a column's records are in the order of the rounds, one
    per round, and two columns with a different number of them (a command
    that failed in one round) cannot be paired: n is 0."""
    a, b = round_times(mine), round_times(peer)
    if a is None or b is None:
        if len(mine) != len(peer):
            return 0, 0
        a, b = dict(enumerate(r["time_us"] for r in mine)), dict(enumerate(r["time_us"] for r in peer))
    common = a.keys() & b.keys()
    return sum(1 for i in common if a[i] > b[i]), len(common)


def round_times(rs):
    """{round: time_us} of records that all carry their round, else None."""
    if not all(isinstance(r.get("round"), int) for r in rs):
        return None
    return {r["round"]: r["time_us"] for r in rs}


def slower_every_round(rows, name):
    """(lost, paired, chance) for ratio name: the rows where occl's column
    was slower than its peer in every one of at least two paired rounds,
    how many rows have two such rounds, and how many rows two columns of
    the same speed would lose by chance: a point of n independent rounds
    loses all of them with probability 2**-n."""
    lost, paired, chance = [], 0, 0.0
    for r in rows:
        k, n = r["slower"].get(name, (0, 0))
        if n < 2:
            continue
        paired += 1
        chance += 0.5 ** n
        if k == n:
            lost.append(r)
    return lost, paired, chance


def worst_points(rows, ratios=GRID_RATIOS):
    """header -> the row with the smallest value of each of ratios (None if
    the ratio was never measured)."""
    worst = {}
    for name, _, _, _ in ratios:
        have = [r for r in rows if (r["ratio"].get(name) or (None,))[0] is not None]
        worst[name] = min(have, key=lambda r: r["ratio"][name][0]) if have else None
    return worst


def print_grid(records, markdown, out):
    """The table of the grid: per point the median time of every column, the
    ratios of GRID_RATIOS (and BASE_RATIOS where the records have a
    baseline), the spread over rounds at the smallest size, and the worst
    point of every ratio."""
    rows = grid_rows(records)
    cols, ratios, spread_cols = grid_layout({c for r in rows for c in r["time"]})
    out("%sCollectives of an MoE layer, float32: median time (us) and time ratios peer/occl"
        % ("## " if markdown else "== "))
    out()
    headers = ["op", "np", "bytes"] + list(cols) + [h for h, _, _, _ in ratios] + [
        "spread " + c for c in spread_cols]
    table = []
    marked = False
    for r in rows:
        size = fmt_bytes(r["bytes"])
        if r["bytes"] not in GRID_SIZES:
            size += "*"
            marked = True
        line = [r["op"], str(r["np"]), size] + [fmt_num(r["time"].get(c)) for c in cols]
        for name, _, _, _ in ratios:
            v, peer = r["ratio"].get(name, (None, None))
            if name not in r["ratio"]:
                line.append("")
            elif v is None:
                line.append("-")
            elif name == "occl-shm/best":
                line.append("%.2fx %s" % (v, peer))
            else:
                line.append("%.2fx" % v)
        line += ["%.2f" % r["spread"][c] if c in r["spread"] else "" for c in spread_cols]
        table.append(line)
    out(render(headers, table, markdown))
    out()
    bullet = "* " if markdown else ""
    worst = worst_points(rows, ratios)
    for name, _, _, _ in ratios:
        w = worst[name]
        if w is None:
            out("%sworst %s: not measured" % (bullet, name))
            continue
        v, peer = w["ratio"][name]
        out("%sworst %s: %.2fx at %s np=%d %s (vs %s)"
            % (bullet, name, v, w["op"], w["np"], fmt_bytes(w["bytes"]), peer))
    for name, _, _, _ in ratios:
        lost, paired, chance = slower_every_round(rows, name)
        if not paired:
            continue
        out("%s%s: slower in every round at %d of %d points (%.2f expected by chance alone)%s"
            % (bullet, name, len(lost), paired, chance,
               ": " + ", ".join("%s np=%d %s" % (r["op"], r["np"], fmt_bytes(r["bytes"])) for r in lost)
               if lost else ""))
    wrong = ["%s np=%d %s %s" % (r["op"], r["np"], fmt_bytes(r["bytes"]), c) for r in rows for c in r["wrong"]]
    if wrong:
        out()
        out("WRONG RESULTS in: " + ", ".join(wrong))
    out()
    rounds = max((r["rounds"] for r in rows), default=1)
    notes = [
        "Each time is the median of up to %d round(s); the rounds of all columns are interleaved." % rounds,
        "Ratios are time(peer)/time(occl) for the same point: above 1x occl is faster. "
        "occl-shm/best takes the fastest of the other four columns and names it; "
        "occl-tcp/gloo is given for alltoall and alltoallv, the operations both time out of place over TCP "
        "(torch's Gloo allreduce and broadcast exist only in place).",
        "alltoallv is the alltoall of the same size with its elements spread by %s: rank s sends "
        "rank d a share proportional to 1/(d+1) (MPI_Alltoallv, all_to_all_single with split sizes, "
        "occl-bench -op alltoallv -skew %s)." % (GRID_SKEW, GRID_SKEW),
        "spread = max/min of the round times at the smallest size of each op and np.",
        "slower in every round: the points where occl's column took longer than the ratio's peer in each "
        "round both ran (at least two, paired by round). Were the two equally fast, a point of n rounds "
        "would lose all n with probability 1/2^n, which sums to the count expected by chance alone; "
        "a slow spell of the machine can span rounds, which makes the count of two alike columns larger.",
        "broadcast compares occl's in-place time: MPI_Bcast and torch's broadcast have one buffer "
        "(out of place, occl's root also copies its source into its output).",
        "bytes follow nccl-tests: the whole buffer per rank (alltoall send buffer, allgather output, "
        "reducescatter input; alltoallv: its alltoall's).",
    ]
    if ratios is not GRID_RATIOS:
        notes.append("base-tcp and base-shm are a second occl-bench (--baseline), run in the same rounds; "
                     "occl-shm/base-shm and occl-tcp/base-tcp are time(base)/time(occl), above 1x this "
                     "build is faster. Where both are the same binary, they show how far one build "
                     "lands from itself in this run (spread base-shm: its rounds at the smallest size).")
    if marked:
        notes.append("Sizes marked * replace 8 B: allgather, reducescatter, alltoall and alltoallv need a per-rank chunk of "
                     "16 bytes (4 float32) in gloo_bench.py and mpi_bench.c, which round the chunk "
                     "down to 16 bytes as nccl-tests does and skip an empty one; the smallest size "
                     "every implementation runs is 16 B x np (32 B at np=2, 64 B at np=4).")
    rs_rows = [r for r in rows if r["op"] == "reducescatter"]
    if rs_rows and not any("gloo" in r["time"] for r in rs_rows):
        notes.append("gloo has no reducescatter in this torch (torch 1.13's Gloo does not "
                             "implement reduce_scatter); its column is empty there.")
    notes.append("'-' means not measured.")
    for n in notes:
        out(bullet + n)
    out()


# Columns of the per-operation latency table (--latency): the benchmarks
# that time every operation, and the pairs compared.
LATENCY_COLS = ("occl-shm", "mpi-shm", "occl-tcp", "mpi-tcp")
LATENCY_PAIRS = (("occl-shm", "mpi-shm"), ("occl-tcp", "mpi-tcp"))


def print_latency(records, markdown, out):
    """With --latency, the grid's points up to 1 KiB: per column the
    medians over rounds of the per-operation median and 99th percentile
    (us), and peer/occl of the medians. Unlike the mean, an operation's
    median does not move when the machine takes a core away for
    milliseconds during a run (which this machine does, to every
    implementation alike)."""
    cells = {}
    for r in records:
        lat, col = r.get("latency"), column_of(r)
        if not lat or col not in LATENCY_COLS or (r.get("bytes") or 0) > 1 << 10:
            continue
        key = (r.get("op"), r.get("np"), r.get("bytes"))
        cells.setdefault(key, {}).setdefault(col, []).append(lat)
    if not cells:
        return
    cols = [c for c in LATENCY_COLS if any(c in v for v in cells.values())]
    out("%sPer-operation latency up to 1 KiB (--latency): median and 99th percentile (us), "
        "medians of the rounds; peer/occl of the medians" % ("## " if markdown else "== "))
    out()
    headers = ["op", "np", "bytes"] + ["%s p50" % c for c in cols] + ["%s p99" % c for c in cols] + [
        "%s/%s" % (b, a) for a, b in LATENCY_PAIRS if a in cols and b in cols]
    table = []
    for key in sorted(cells, key=lambda k: (str(k[0]), k[1] or 0, k[2] or 0)):
        c = cells[key]
        med = {col: (median([x["p50_us"] for x in c[col]]),
                     median([x["p99_us"] for x in c[col]])) for col in c}
        line = [str(key[0]), str(key[1]), fmt_bytes(key[2] or 0)]
        line += [fmt_num(med[col][0]) if col in med else "" for col in cols]
        line += [fmt_num(med[col][1]) if col in med else "" for col in cols]
        for a, b in LATENCY_PAIRS:
            if a in cols and b in cols:
                line.append("%.2fx" % (med[b][0] / med[a][0]) if a in med and b in med and med[a][0] > 0 else "")
        table.append(line)
    out(render(headers, table, markdown))
    out()


def print_tables(records, markdown=False, file=sys.stdout):
    limits = {r.get("what"): r for r in records if r.get("impl") == "limit"}
    memcpy = (limits.get("memcpy") or {}).get("GBps")
    tcp_bw = (limits.get("tcp_loopback") or {}).get("GBps")
    tcp_bidir = (limits.get("tcp_loopback_bidir") or {}).get("GBps")
    rtt = (limits.get("tcp_rtt_8B") or {}).get("us")
    line_rtt = (limits.get("shm_line_rtt") or {}).get("us")
    line_exch = (limits.get("shm_line_exchange") or {}).get("us")
    meta = next((r for r in records if r.get("impl") == "meta"), {})

    def out(s=""):
        print(s, file=file)

    title = "# " if markdown else ""
    out("%soccl vs Gloo vs Open MPI on %s (%s CPUs%s)" % (
        title, meta.get("hostname", "this host"), meta.get("cpus", "?"),
        ", " + meta["cpu"] if meta.get("cpu") else ""))
    if meta:
        out("%s, torch %s, %s, CPUs busy with other work at start: %s" % (
            meta.get("date", ""), meta.get("torch", "-"), meta.get("mpi", "MPI -"),
            meta.get("busy_cpus_at_start", "-")))
    if meta.get("hugepages"):
        policy = meta.get("shmem_thp")
        out("occl's buffers from its allocator, the others' in transparent huge pages (--hugepages); "
            "shared memory's huge-page policy %s" % (
                "not recorded" if policy is None else "%s (%s)" % (
                    policy, "occl's shared buffers from 2 MiB on huge pages"
                    if policy in ("always", "within_size", "advise", "force")
                    else "occl's shared buffers on 4 KiB pages")))
    out()
    out("Machine limits: memcpy %s GB/s, loopback TCP %s GB/s (one stream), %s GB/s per direction "
        "with both directions at once (the ceiling of a 2-rank all-reduce over TCP), "
        "TCP 8 B round trip %s us, a cache line between two processes through shared memory: "
        "%s us round trip, %s us per round of an exchange (both write, then both wait: the floor "
        "of a 2-rank all-reduce of a few bytes on shared memory)"
        % (fmt_num(memcpy, 0), fmt_num(tcp_bw, 0), fmt_num(tcp_bidir, 0), fmt_num(rtt, 0),
           fmt_num(line_rtt, 0), fmt_num(line_exch, 0)))
    out()

    # Group measurements: group -> (op, np, bytes) -> column -> records;
    # repeated rounds of the same cell are reduced to their median.
    groups = {}
    grid = [r for r in records if r.get("group") == "grid"]
    if grid:
        print_grid(grid, markdown, out)
        print_latency(grid, markdown, out)
    for r in records:
        if r.get("impl") in ("meta", "run", "limit") or "busbw_GBps" not in r:
            continue
        if r.get("group") == "grid":
            continue
        col = column_of(r)
        if col not in IMPLS:
            continue
        g = r.get("group") or "%s np=%s" % (r.get("op"), r.get("np"))
        key = (r.get("op"), r.get("np"), r.get("bytes"))
        groups.setdefault(g, {}).setdefault(key, {}).setdefault(col, []).append(r)
    for rows in groups.values():
        for cells in rows.values():
            for col, rs in cells.items():
                cells[col] = median_record(rs)

    for g, rows in groups.items():
        keys = sorted(rows)
        op = keys[0][0] if keys else "?"
        out("%s%s, float32: bus bandwidth (GB/s)" % ("## " if markdown else "== ", g))
        out()
        headers = ["bytes"] + list(IMPLS) + [
            "occl/gloo", "occl/mpi-tcp", "occl-shm/mpi-shm", "occl-tcp/tcp-bidir", "occl-shm/memcpy"]
        table = []
        for k in keys:
            cells = rows[k]
            bw = {c: (cells[c].get("busbw_GBps") if c in cells else None) for c in IMPLS}
            # torch only has in-place allreduce, broadcast and reduce, so
            # Gloo is compared with occl's in-place measurement of those.
            inpl = {c: (cells[c].get("inplace_busbw_GBps") or None) if c in cells else None for c in IMPLS}
            vs_gloo = bw["occl-tcp"]
            if op in ("allreduce", "broadcast", "reduce") and inpl["occl-tcp"]:
                vs_gloo = inpl["occl-tcp"]
            table.append([fmt_bytes(k[2])] + [fmt_num(bw[c]) for c in IMPLS] + [
                fmt_ratio(vs_gloo, bw["gloo"]),
                fmt_ratio(bw["occl-tcp"], bw["mpi-tcp"]),
                fmt_ratio(bw["occl-shm"], bw["mpi-shm"]),
                fmt_pct(bw["occl-tcp"], tcp_bidir or tcp_bw),
                fmt_pct(bw["occl-shm"], memcpy),
            ])
        out(render(headers, table, markdown))
        out()
        out("%s%s, float32: time (us)" % ("## " if markdown else "== ", g))
        out()
        headers = ["bytes"] + list(IMPLS)
        table = []
        for k in keys:
            cells = rows[k]
            table.append([fmt_bytes(k[2])] + [
                fmt_num(cells[c].get("time_us") if c in cells else None) for c in IMPLS])
        out(render(headers, table, markdown))
        wrong = sorted({"%s %s" % (c, fmt_bytes(k[2]))
                        for k in keys for c, r in rows[k].items() if (r.get("wrong") or 0) > 0})
        if wrong:
            out()
            out("WRONG RESULTS in: " + ", ".join(wrong))
        out()
    if not groups:
        return
    rounds = max((c.get("rounds", 1) for rows in groups.values() for cells in rows.values()
                  for c in cells.values()), default=1)
    out("Each cell is the median of %d round(s). Ratios are busbw(occl)/busbw(peer) for the "
        "same bytes: above 1x occl is faster. occl/gloo and occl/mpi-tcp use occl over TCP "
        "(occl/gloo with occl's in-place time for allreduce, broadcast and reduce, which torch "
        "only has in place); the occl columns are out-of-place. The last two columns are occl's "
        "busbw as a share of the two-way loopback TCP bandwidth and of memcpy. '-' means not measured."
        % rounds)


# ------------------------------------------------------------------ plot --

# The columns of the plot, in legend order, with a colour and marker each
# (the same in every panel).
PLOT_STYLE = (
    ("occl-shm", "#d62728", "o"),
    ("occl-tcp", "#ff7f0e", "s"),
    ("gloo", "#2ca02c", "^"),
    ("mpi-shm", "#1f77b4", "D"),
    ("mpi-tcp", "#9467bd", "v"),
)


def plot_series(records):
    """{(op, np): {column: [(bytes, median busbw GB/s)]}} of every
    measurement with a positive bus bandwidth, legacy and grid records
    alike; repeated records of a point (rounds, or the same size in two
    cases) are reduced to their median."""
    cells = {}
    for r in records:
        if r.get("impl") in ("meta", "run", "limit"):
            continue
        bw, b = r.get("busbw_GBps"), r.get("bytes")
        if not isinstance(bw, (int, float)) or bw <= 0 or not isinstance(b, int) or b <= 0:
            continue
        col = column_of(r)
        if col not in IMPLS or not r.get("op") or not isinstance(r.get("np"), int):
            continue
        cells.setdefault((r["op"], r["np"]), {}).setdefault(col, {}).setdefault(b, []).append(bw)
    out = {}
    for key, cols in cells.items():
        out[key] = {c: [(b, median(v)) for b, v in sorted(pts.items())] for c, pts in cols.items()}
    return out


def import_pyplot():
    """matplotlib's pyplot with the Agg backend, or a SystemExit saying what
    to install."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit("compare: --plot needs matplotlib (%s); install it with "
                         "apt-get install python3-matplotlib" % e)
    return matplotlib, plt


def write_plot(records, path):
    """Draws the records' bus bandwidth against size into the SVG file path
    (see the module docstring). Returns the number of panels."""
    matplotlib, plt = import_pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator
    series = plot_series(records)
    if not series:
        raise SystemExit("compare: --plot: no measurement with a bus bandwidth in the records")
    order = {op: i for i, op in enumerate(GRID_OPS)}
    panels = sorted(series, key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))
    matplotlib.rcParams.update({
        "svg.hashsalt": "occl",      # element ids do not change between runs
        "svg.fonttype": "none",      # text stays text: searchable, smaller
        "font.family": "DejaVu Sans",
        "font.size": 9,
    })
    ncols = min(3, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows + 0.6), squeeze=False)
    present = set()
    for i, (op, np) in enumerate(panels):
        ax = axes[i // ncols][i % ncols]
        sizes = set()
        for col, color, marker in PLOT_STYLE:
            pts = series[(op, np)].get(col)
            if not pts:
                continue
            present.add(col)
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            sizes.update(xs)
            line, = ax.plot(xs, ys, color=color, marker=marker, markersize=4, linewidth=1.4, label=col)
            line.set_gid("series-%s-np%d-%s" % (op, np, col))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted(sizes)
        if len(ticks) > 8:
            step = (len(ticks) + 7) // 8
            ticks = ticks[::step]
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_bytes(b) for b in ticks], rotation=45, ha="right")
        if len(sizes) == 1:
            b = ticks[0]
            ax.set_xlim(b / 4, b * 4)
        ys = [bw for pts in series[(op, np)].values() for _, bw in pts]
        if max(ys) / min(ys) < 30:
            # Less than a decade or two: label 1, 2 and 5 of each decade.
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title("%s, np=%d" % (op, np))
        ax.set_xlabel("message size (bytes per rank)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    handles = [plt.Line2D([], [], color=c, marker=m, markersize=4, linewidth=1.4, label=col)
               for col, c, m in PLOT_STYLE if col in present]
    height = fig.get_figheight()
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.25 / height))
    meta = next((r for r in records if r.get("impl") == "meta"), {})
    title = "occl vs Gloo vs Open MPI, float32: bus bandwidth"
    if meta:
        title += " (%s, %s CPUs, %s)" % (meta.get("hostname", "?"), meta.get("cpus", "?"),
                                        str(meta.get("date", ""))[:10])
    fig.suptitle(title, y=0.995, fontsize=10, va="top")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return len(panels)


def main():
    p = argparse.ArgumentParser(
        description="occl vs Gloo vs Open MPI on this machine (see the module docstring).")
    p.add_argument("--out", help="JSONL file for all raw records "
                   "(default bench/results/compare-<date>.jsonl)")
    p.add_argument("--occl-bin", help="use this occl-bench instead of building it")
    p.add_argument("--baseline", metavar="BIN",
                   help="also run this occl-bench (another build, or the same one for an A/A "
                        "comparison) as the columns base-tcp and base-shm")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch for Gloo")
    p.add_argument("--skip", default="", help="comma-separated: occl,gloo,mpi,limits")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="do not verify results (-c 0 everywhere)")
    p.add_argument("--quick", action="store_true",
                   help="every case with a few iterations and one round (smoke test)")
    p.add_argument("--ops", default="", help="comma-separated subset of: " + ",".join(GRID_OPS))
    p.add_argument("--np", default="", help="comma-separated subset of: "
                   + ",".join(str(n) for n in GRID_NP))
    p.add_argument("--legacy", action="store_true",
                   help="run the earlier AllReduce-centred set instead of the grid")
    p.add_argument("--hugepages", action="store_true",
                   help="every implementation's buffers as a program tuned for it allocates them: "
                        "occl-bench -hugepages (occl's allocator, whose buffers the peers map), "
                        "and " + HUGE_MALLOC + " for mpi_bench and gloo_bench.py (transparent huge pages)")
    p.add_argument("--latency", action="store_true",
                   help="time every operation (occl-bench and mpi_bench -latency) and add a table of "
                        "the per-operation median and 99th percentile at the grid's points up to 1 KiB")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per command")
    p.add_argument("--repeat", type=int, default=None,
                   help="rounds of every command; tables show the median (default 3, 1 with --quick)")
    p.add_argument("--steady", type=float, default=0, metavar="SECONDS",
                   help="before each command, wait up to this long for the machine to pass a cache "
                        "line between two processes within %.0fx of the median exchange in this run "
                        "(bench/peers/limits -only line); each command's run line records the exchange "
                        "seen before it" % STEADY_RATIO)
    p.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                   help="before each command, wait up to this long for the machine to be idle")
    p.add_argument("--verbose", action="store_true", help="show every command's stderr")
    p.add_argument("--table", metavar="JSONL", help="only print the tables of an earlier run")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--plot", metavar="FILE.svg",
                   help="also draw bus bandwidth against size, one panel per op and np, into "
                   "this SVG file (needs python3-matplotlib)")
    args = p.parse_args()
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    for o in (o for o in args.ops.split(",") if o):
        if o not in GRID_OPS:
            p.error("--ops: unknown operation %r (one of %s)" % (o, ",".join(GRID_OPS)))
    for n in (n for n in args.np.split(",") if n):
        if not n.isdigit() or int(n) < 2:
            p.error("--np: %r is not a process count of at least 2" % n)

    if args.plot:
        import_pyplot()  # before a run of many minutes, not after it
    try:
        if args.table:
            records = load_records(args.table)
        else:
            records, _ = run_all(args)
        if args.plot:
            n = write_plot(records, args.plot)
            log("compare: wrote %s (%d panels)" % (args.plot, n))
        print_tables(records, args.markdown)
    except BrokenPipeError:
        # Output piped into head or similar; nothing left to say.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
