/*
 * mpi_bench: nccl-tests style benchmark of MPI collectives on host memory.
 *
 * Build:  mpicc -std=c99 -O2 -Wall -o /tmp/mpi_bench bench/peers/mpi_bench.c -lm
 *         (or: make -C bench/peers, which writes bench/peers/mpi_bench)
 *
 * Run (Open MPI, shared memory):
 *   mpirun --allow-run-as-root --oversubscribe -np 2 \
 *       --mca pml ob1 --mca btl self,vader \
 *       /tmp/mpi_bench -op allreduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1
 * over loopback TCP instead: --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
 * ("--mca pml ob1" keeps Open MPI on the BTL that was asked for; the UCX PML
 * would otherwise ignore the --mca btl choice.)
 *
 * Flags (same style as occl-bench and gloo_bench.py):
 *   -op allreduce|allgather|alltoall|alltoallv|reducescatter|broadcast|reduce|sendrecv
 *   -skew uniform|zipf:S   alltoallv's demand, as occl-bench's -skew: every
 *                   rank sends rank d a share proportional to 1/(d+1)^S of
 *                   what a uniform all-to-all of the size moves (rounded down)
 *   -b MIN -e MAX   sizes in bytes, K/M/G suffixes (powers of 1024)
 *   -f FACTOR       multiply the size by FACTOR (> 1); -i STEP adds STEP if -f is 1
 *   -n ITERS -w WARMUP   timed and warm-up iterations per size
 *   -t MS           least time in milliseconds the warm-up of each size lasts
 *                   (default 20; more warm-up iterations follow -w's, as many
 *                   on every rank, if they take less; 0: -w alone), as
 *                   occl-bench's -warmup-time
 *   -c 0|1          check the results of one extra iteration per size
 *   -d float32|float64|int32|int64   -o sum|prod|max|min   -r ROOT
 *   -transport LABEL  value of the "transport" field; by default it is derived
 *                   from OMPI_MCA_btl (set by mpirun --mca btl ...): "shm" if it
 *                   names vader or sm, "tcp" if it names tcp, else "default"
 *   -json           accepted for symmetry; JSON is always printed
 *   -latency        time every iteration of the timed loop and add its
 *                   distribution ("latency", see below)
 *
 * Output: rank 0 prints one JSON object per size on stdout, with the fields
 * of occl-bench -json ("impl":"openmpi"), and an nccl-tests style table on
 * stderr.
 *
 * Sizes and bandwidths follow nccl-tests (src/common.cu setupArgs and
 * BenchTime, the *GetCollByteCount and *GetBw functions of each collective,
 * doc/PERFORMANCE.md):
 *   - the sweep gives S bytes; count = S / sizeof(type);
 *   - allreduce, broadcast, reduce: one buffer of count elements;
 *   - sendrecv: count elements sent to the next rank and received from the
 *     previous one (MPI_Sendrecv), as occl-bench's sendrecv;
 *     "bytes" = count*size, "count" = count;
 *   - allgather, reducescatter, alltoall, alltoallv: per-rank chunk
 *     base = (count / np) rounded down to a multiple of 16 bytes of elements;
 *     "count" = base (the count argument of the collective: per-rank send
 *     count of allgather, per-rank receive count of reduce-scatter, per-peer
 *     count of alltoall) and "bytes" = base*np*size, the larger of the send
 *     and receive buffers (alltoallv: of the uniform all-to-all whose
 *     elements -skew spreads over the pairs);
 *   - algbw = bytes / time with GB = 1e9 bytes; busbw = algbw * 2(n-1)/n for
 *     allreduce, (n-1)/n for allgather, reducescatter and alltoall, 1 for
 *     broadcast and reduce;
 *   - time = max over ranks of each rank's average time per iteration
 *     (MPI_Wtime around the timed loop after a barrier, MPI_Allreduce MAX);
 *   - -latency (occl-bench's -latency): every iteration of the timed loop
 *     timed by one MPI_Wtime after it, and "latency" gives their nearest-
 *     rank median, 99th percentile and maximum, each the largest of the
 *     ranks'.
 * Every collective is out of place except broadcast, which MPI defines in
 * place. Sizes whose per-rank chunk rounds down to 0 elements are skipped.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "latency.h"
#include "skew.h"

enum op_kind {
    OP_ALLREDUCE,
    OP_ALLGATHER,
    OP_ALLTOALL,
    OP_REDUCESCATTER,
    OP_BROADCAST,
    OP_REDUCE,
    OP_ALLTOALLV,
    OP_SENDRECV
};

static const char *op_names[] = {"allreduce", "allgather", "alltoall", "reducescatter",
                                 "broadcast", "reduce", "alltoallv", "sendrecv"};
#define NUM_OPS 8

enum dtype_kind { DT_F32, DT_F64, DT_I32, DT_I64 };

struct dtype_info {
    const char *name;
    enum dtype_kind kind;
    size_t size;
};

static const struct dtype_info dtypes[] = {
    {"float32", DT_F32, 4},
    {"float64", DT_F64, 8},
    {"int32", DT_I32, 4},
    {"int64", DT_I64, 8},
};

static MPI_Datatype mpi_type(const struct dtype_info *dt)
{
    switch (dt->kind) {
    case DT_F32: return MPI_FLOAT;
    case DT_F64: return MPI_DOUBLE;
    case DT_I32: return MPI_INT32_T;
    default: return MPI_INT64_T;
    }
}

struct options {
    enum op_kind op;
    size_t minbytes, maxbytes, stepbytes;
    long stepfactor;
    int iters, warmup, check, root, latency;
    double warmup_ms;
    const struct dtype_info *dt;
    const char *redop_name;
    MPI_Op redop;
    const char *transport;
    double zipf; /* -skew zipf:S; negative: uniform */
};

/* alltoallv's layout of the current size: counts[s*n+d] elements from rank
 * s to rank d, packed in destination order on the sender and in source
 * order on the receiver (see vlayout). */
static int *vcounts, *vsc, *vsd, *vrc, *vrd;

static int rank, nranks;

static void die(const char *msg)
{
    if (rank == 0) fprintf(stderr, "mpi_bench: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* Parses "64M", "1K", "8": a number with an optional K, M or G suffix. */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double mult = 1;
    if (*end == 'k' || *end == 'K') mult = 1024.0, end++;
    else if (*end == 'm' || *end == 'M') mult = 1024.0 * 1024, end++;
    else if (*end == 'g' || *end == 'G') mult = 1024.0 * 1024 * 1024, end++;
    if (*end != '\0') return -1;
    *out = (size_t)(v * mult);
    return 0;
}

static void usage(void)
{
    if (rank == 0)
        fprintf(stderr,
                "usage: mpi_bench -op OP [-b MIN] [-e MAX] [-f FACTOR] [-i STEP] [-n ITERS]\n"
                "                 [-w WARMUP] [-t MS] [-c 0|1] [-d TYPE] [-o REDOP] [-r ROOT]\n"
                "                 [-transport LABEL] [-json] [-latency]\n"
                "                 [-skew uniform|zipf:S]\n"
                "  OP: allreduce allgather alltoall alltoallv reducescatter broadcast reduce sendrecv\n");
}

static void parse_args(int argc, char **argv, struct options *o)
{
    o->op = OP_ALLREDUCE;
    o->minbytes = 8;
    o->maxbytes = 64u << 20;
    o->stepbytes = 1u << 20;
    o->stepfactor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->warmup_ms = 20;
    o->check = 0;
    o->root = 0;
    o->dt = &dtypes[0];
    o->redop_name = "sum";
    o->redop = MPI_SUM;
    o->transport = NULL;
    o->zipf = -1;
    o->latency = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-json") == 0) continue;
        if (strcmp(a, "-latency") == 0) {
            o->latency = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0) {
            usage();
            MPI_Finalize();
            exit(0);
        }
        if (i + 1 >= argc) {
            usage();
            die("missing value for a flag");
        }
        const char *v = argv[++i];
        if (strcmp(a, "-op") == 0) {
            int found = 0;
            for (int k = 0; k < NUM_OPS; k++)
                if (strcmp(v, op_names[k]) == 0) o->op = (enum op_kind)k, found = 1;
            if (!found) die("unknown -op");
        } else if (strcmp(a, "-b") == 0) {
            if (parse_size(v, &o->minbytes)) die("bad -b");
        } else if (strcmp(a, "-e") == 0) {
            if (parse_size(v, &o->maxbytes)) die("bad -e");
        } else if (strcmp(a, "-i") == 0) {
            if (parse_size(v, &o->stepbytes)) die("bad -i");
        } else if (strcmp(a, "-f") == 0) {
            o->stepfactor = strtol(v, NULL, 10);
        } else if (strcmp(a, "-n") == 0) {
            o->iters = atoi(v);
        } else if (strcmp(a, "-w") == 0) {
            o->warmup = atoi(v);
        } else if (strcmp(a, "-t") == 0) {
            o->warmup_ms = atof(v);
        } else if (strcmp(a, "-c") == 0) {
            o->check = atoi(v);
        } else if (strcmp(a, "-r") == 0) {
            o->root = atoi(v);
        } else if (strcmp(a, "-d") == 0) {
            int found = 0;
            for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
                if (strcmp(v, dtypes[k].name) == 0) o->dt = &dtypes[k], found = 1;
            if (!found) die("unknown -d (float32, float64, int32, int64)");
        } else if (strcmp(a, "-o") == 0) {
            o->redop_name = v;
            if (strcmp(v, "sum") == 0) o->redop = MPI_SUM;
            else if (strcmp(v, "prod") == 0) o->redop = MPI_PROD;
            else if (strcmp(v, "max") == 0) o->redop = MPI_MAX;
            else if (strcmp(v, "min") == 0) o->redop = MPI_MIN;
            else die("unknown -o (sum, prod, max, min)");
        } else if (strcmp(a, "-skew") == 0) {
            o->zipf = -1;
            if (strcmp(v, "uniform") != 0) {
                char *end = (char *)v;
                if (strncmp(v, "zipf:", 5) == 0) o->zipf = strtod(v + 5, &end);
                if (end == v || end == v + 5 || *end != '\0' || !(o->zipf >= 0))
                    die("bad -skew (uniform or zipf:S with S >= 0)");
            }
        } else if (strcmp(a, "-transport") == 0) {
            o->transport = v;
        } else {
            usage();
            die("unknown flag");
        }
    }
    if (o->iters < 1 || o->warmup < 0) die("need -n >= 1 and -w >= 0");
    if (o->minbytes > o->maxbytes) die("-b larger than -e");
    if (o->root < 0 || o->root >= nranks) die("-r out of range");
    if (o->stepfactor < 1) die("-f must be >= 1");
    if (o->stepfactor == 1 && o->stepbytes == 0) die("-i must be > 0 when -f is 1");
    if (o->transport == NULL) {
        const char *btl = getenv("OMPI_MCA_btl");
        if (btl && (strstr(btl, "vader") || strstr(btl, "sm"))) o->transport = "shm";
        else if (btl && strstr(btl, "tcp")) o->transport = "tcp";
        else o->transport = "default";
    }
}

static int is_reducing(enum op_kind op)
{
    return op == OP_ALLREDUCE || op == OP_REDUCESCATTER || op == OP_REDUCE;
}

/*
 * Test data: small integers, exact in every type, so results compare for
 * equality. Reductions use 1..7 (a product over 8 ranks fits a float32
 * mantissa); data movement uses 0..250 with a rank-dependent phase, so that
 * a chunk from the wrong rank or at the wrong offset shows.
 */
static int64_t pattern(enum op_kind op, int r, size_t i)
{
    if (is_reducing(op)) return (int64_t)((i + 3 * (size_t)r) % 7) + 1;
    return (int64_t)((i + 37 * (size_t)r) % 251);
}

static void store(const struct dtype_info *dt, void *buf, size_t i, double v)
{
    switch (dt->kind) {
    case DT_F32: ((float *)buf)[i] = (float)v; break;
    case DT_F64: ((double *)buf)[i] = v; break;
    case DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double load(const struct dtype_info *dt, const void *buf, size_t i)
{
    switch (dt->kind) {
    case DT_F32: return ((const float *)buf)[i];
    case DT_F64: return ((const double *)buf)[i];
    case DT_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

/* Fills n elements of buf with rank r's pattern starting at element offset. */
static void fill(const struct options *o, void *buf, size_t n, int r, size_t offset)
{
    for (size_t i = 0; i < n; i++) store(o->dt, buf, i, (double)pattern(o->op, r, offset + i));
}

/* The reduction over all ranks of element i of the pattern. */
static double reduced(const struct options *o, size_t i)
{
    double acc = (double)pattern(o->op, 0, i);
    for (int r = 1; r < nranks; r++) {
        double v = (double)pattern(o->op, r, i);
        if (o->redop == MPI_SUM) acc += v;
        else if (o->redop == MPI_PROD) acc *= v;
        else if (o->redop == MPI_MAX) acc = v > acc ? v : acc;
        else acc = v < acc ? v : acc;
    }
    return acc;
}

/* Runs the collective once. pc is the count argument (see the header). */
static void run_once(const struct options *o, void *send, void *recv, size_t pc)
{
    MPI_Datatype t = mpi_type(o->dt);
    int c = (int)pc;
    switch (o->op) {
    case OP_ALLREDUCE: MPI_Allreduce(send, recv, c, t, o->redop, MPI_COMM_WORLD); break;
    case OP_ALLGATHER: MPI_Allgather(send, c, t, recv, c, t, MPI_COMM_WORLD); break;
    case OP_ALLTOALL: MPI_Alltoall(send, c, t, recv, c, t, MPI_COMM_WORLD); break;
    case OP_ALLTOALLV: MPI_Alltoallv(send, vsc, vsd, t, recv, vrc, vrd, t, MPI_COMM_WORLD); break;
    case OP_REDUCESCATTER:
        MPI_Reduce_scatter_block(send, recv, c, t, o->redop, MPI_COMM_WORLD);
        break;
    case OP_BROADCAST: MPI_Bcast(send, c, t, o->root, MPI_COMM_WORLD); break;
    case OP_REDUCE: MPI_Reduce(send, recv, c, t, o->redop, o->root, MPI_COMM_WORLD); break;
    case OP_SENDRECV:
        /* A ring step, as occl-bench's sendrecv: to the right, from the left. */
        MPI_Sendrecv(send, c, t, (rank + 1) % nranks, 0, recv, c, t, (rank + nranks - 1) % nranks, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    }
}

/* Element counts of the send and receive buffers for count argument pc. */
static void buffer_counts(const struct options *o, size_t pc, size_t *nsend, size_t *nrecv)
{
    size_t n = (size_t)nranks;
    switch (o->op) {
    case OP_ALLGATHER: *nsend = pc, *nrecv = pc * n; break;
    case OP_ALLTOALL: *nsend = pc * n, *nrecv = pc * n; break;
    case OP_ALLTOALLV:
        *nsend = (size_t)vsd[n - 1] + (size_t)vsc[n - 1];
        *nrecv = (size_t)vrd[n - 1] + (size_t)vrc[n - 1];
        break;
    case OP_REDUCESCATTER: *nsend = pc * n, *nrecv = pc; break;
    case OP_BROADCAST: *nsend = pc, *nrecv = 0; break;
    default: *nsend = pc, *nrecv = pc; break;
    }
}

/* Resets the buffers to the check pattern before the checked iteration. */
static void fill_for_check(const struct options *o, void *send, void *recv, size_t pc)
{
    size_t ns, nr;
    buffer_counts(o, pc, &ns, &nr);
    fill(o, send, ns, rank, 0);
    if (nr) memset(recv, 0, nr * o->dt->size);
}

static long long count_wrong(const struct options *o, const void *send, const void *recv, size_t pc)
{
    long long wrong = 0;
    size_t n = (size_t)nranks;
    switch (o->op) {
    case OP_ALLREDUCE:
        for (size_t i = 0; i < pc; i++) wrong += load(o->dt, recv, i) != reduced(o, i);
        break;
    case OP_REDUCE:
        if (rank == o->root)
            for (size_t i = 0; i < pc; i++) wrong += load(o->dt, recv, i) != reduced(o, i);
        break;
    case OP_REDUCESCATTER:
        for (size_t i = 0; i < pc; i++)
            wrong += load(o->dt, recv, i) != reduced(o, (size_t)rank * pc + i);
        break;
    case OP_BROADCAST:
        for (size_t i = 0; i < pc; i++)
            wrong += load(o->dt, send, i) != (double)pattern(o->op, o->root, i);
        break;
    case OP_ALLGATHER:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < pc; i++)
                wrong += load(o->dt, recv, s * pc + i) != (double)pattern(o->op, (int)s, i);
        break;
    case OP_ALLTOALL:
        /* Block s of my output is block <rank> of rank s's input. */
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < pc; i++)
                wrong += load(o->dt, recv, s * pc + i) !=
                         (double)pattern(o->op, (int)s, (size_t)rank * pc + i);
        break;
    case OP_ALLTOALLV:
        /* Block s of my output is rank s's block for me, which starts
         * after its blocks for the ranks before me. */
        for (size_t s = 0; s < n; s++) {
            size_t off = 0;
            for (int d = 0; d < rank; d++) off += (size_t)vcounts[s * n + (size_t)d];
            for (size_t i = 0; i < (size_t)vrc[s]; i++)
                wrong += load(o->dt, recv, (size_t)vrd[s] + i) != (double)pattern(o->op, (int)s, off + i);
        }
        break;
    case OP_SENDRECV:
        for (size_t i = 0; i < pc; i++)
            wrong += load(o->dt, recv, i) != (double)pattern(o->op, (rank + nranks - 1) % nranks, i);
        break;
    }
    return wrong;
}

/*
 * Sets alltoallv's layout for pc elements per pair of the uniform
 * all-to-all: its n*n*pc elements spread over the pairs in proportion to
 * the weights 1/(d+1)^S of the destinations d (all 1 for uniform), rounded
 * down, as occl-bench's Demand.Counts does (skew_counts, skew.h).
 */
static void vlayout(const struct options *o, size_t pc)
{
    size_t n = (size_t)nranks;
    if (skew_counts(o->zipf, n, pc, vcounts) != 0) die("size too large for an MPI int count");
    int sd = 0, rd = 0;
    for (size_t j = 0; j < n; j++) {
        vsc[j] = vcounts[(size_t)rank * n + j], vsd[j] = sd, sd += vsc[j];
        vrc[j] = vcounts[j * n + (size_t)rank], vrd[j] = rd, rd += vrc[j];
    }
}

static double busbw_factor(enum op_kind op, int n)
{
    switch (op) {
    case OP_ALLREDUCE: return 2.0 * (n - 1) / n;
    case OP_ALLGATHER:
    case OP_REDUCESCATTER:
    case OP_ALLTOALL:
    case OP_ALLTOALLV: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    struct options o;
    parse_args(argc, argv, &o);
    const size_t elt = o.dt->size;
    const char *redop = is_reducing(o.op) ? o.redop_name : "none";
    const int rooted = o.op == OP_BROADCAST || o.op == OP_REDUCE;

    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl) *nl = '\0';
        fprintf(stderr,
                "# mpi_bench: %s\n# np %d, op %s, dtype %s, redop %s, root %d, warmup %d, "
                "iters %d, check %d, transport %s\n",
                lib, nranks, op_names[o.op], o.dt->name, redop, o.root, o.warmup, o.iters,
                o.check, o.transport);
        fprintf(stderr, "# %10s %12s %8s %6s %5s %10s %8s %8s %8s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong");
        fprintf(stderr, "# %10s %12s %8s %6s %5s %10s %8s %8s %8s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "");
    }

    const double factor = busbw_factor(o.op, nranks);
    if (o.op == OP_ALLTOALLV) {
        size_t n = (size_t)nranks;
        vcounts = malloc(n * n * sizeof *vcounts);
        vsc = malloc(n * sizeof *vsc), vsd = malloc(n * sizeof *vsd);
        vrc = malloc(n * sizeof *vrc), vrd = malloc(n * sizeof *vrd);
        if (!vcounts || !vsc || !vsd || !vrc || !vrd) die("out of memory");
    }
    double *lat = NULL;
    if (o.latency && !(lat = malloc((size_t)o.iters * sizeof *lat))) die("out of memory");
    for (size_t size = o.minbytes; size <= o.maxbytes;
         size = o.stepfactor > 1 ? size * (size_t)o.stepfactor : size + o.stepbytes) {
        size_t count = size / elt, pc, nbytes;
        if (o.op == OP_ALLGATHER || o.op == OP_REDUCESCATTER || o.op == OP_ALLTOALL || o.op == OP_ALLTOALLV) {
            size_t align = elt >= 16 ? 1 : 16 / elt;
            pc = (count / (size_t)nranks) / align * align;
            nbytes = pc * (size_t)nranks * elt;
        } else {
            pc = count;
            nbytes = count * elt;
        }
        if (pc == 0) {
            if (rank == 0)
                fprintf(stderr, "# skip %zu B: per-rank chunk rounds down to 0 elements\n", size);
            if (size == 0) break;
            continue;
        }
        if (pc > (size_t)INT32_MAX) die("size too large for an MPI int count");
        if (o.op == OP_ALLTOALLV) vlayout(&o, pc);

        size_t ns, nr;
        buffer_counts(&o, pc, &ns, &nr);
        void *send = malloc(ns * elt);
        void *recv = nr ? malloc(nr * elt) : NULL;
        if (!send || (nr && !recv)) die("out of memory");
        fill(&o, send, ns, rank, 0);
        if (nr) memset(recv, 0, nr * elt);

        double w0 = MPI_Wtime();
        for (int i = 0; i < o.warmup; i++) run_once(&o, send, recv, pc);
        if (o.warmup > 0 && o.warmup_ms > 0) {
            /* While any rank's warm-up is short of its time, as many more
             * as the time left needs at the pace of the last batch, the
             * same number on every rank (agreed per batch), as occl-bench
             * does: first calls slower than the rest cannot end it early. */
            long long batch = o.warmup, most;
            double btook = MPI_Wtime() - w0;
            for (;;) {
                double left = o.warmup_ms / 1e3 - (MPI_Wtime() - w0);
                long long more = 0;
                if (left > 0) more = (long long)(left / (btook > 0 ? btook / batch : 1e-9)) + 1;
                MPI_Allreduce(&more, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
                if (most == 0) break;
                double b0 = MPI_Wtime();
                for (long long i = 0; i < most; i++) run_once(&o, send, recv, pc);
                batch = most;
                btook = MPI_Wtime() - b0;
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (lat) {
            double last = t0;
            for (int i = 0; i < o.iters; i++) {
                run_once(&o, send, recv, pc);
                double now = MPI_Wtime();
                lat[i] = now - last;
                last = now;
            }
        } else {
            for (int i = 0; i < o.iters; i++) run_once(&o, send, recv, pc);
        }
        double avg = (MPI_Wtime() - t0) / o.iters, sec;
        MPI_Allreduce(&avg, &sec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double dist[3] = {0, 0, 0};
        if (lat) {
            double mine[3];
            latency_of(lat, o.iters, mine);
            MPI_Allreduce(mine, dist, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        }

        long long wrong = -1;
        if (o.check) {
            fill_for_check(&o, send, recv, pc);
            MPI_Barrier(MPI_COMM_WORLD);
            run_once(&o, send, recv, pc);
            long long mine = count_wrong(&o, send, recv, pc);
            MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        }

        double algbw = sec > 0 ? (double)nbytes / sec / 1e9 : 0;
        double busbw = algbw * factor;
        if (rank == 0) {
            printf("{\"impl\": \"openmpi\", \"op\": \"%s\", \"np\": %d, \"bytes\": %zu, "
                   "\"count\": %zu, \"dtype\": \"%s\", \"redop\": \"%s\", \"algo\": \"mpi\", "
                   "\"transport\": \"%s\", \"time_us\": %.6g, \"algbw_GBps\": %.6g, "
                   "\"busbw_GBps\": %.6g, \"wrong\": %lld, \"iters\": %d",
                   op_names[o.op], nranks, nbytes, pc, o.dt->name, redop, o.transport,
                   sec * 1e6, algbw, busbw, wrong, o.iters);
            if (lat)
                printf(", \"latency\": {\"p50_us\": %.6g, \"p99_us\": %.6g, \"max_us\": %.6g}",
                       dist[0] * 1e6, dist[1] * 1e6, dist[2] * 1e6);
            printf("}\n");
            fflush(stdout);
            char rootstr[16];
            snprintf(rootstr, sizeof rootstr, "%d", o.root);
            char wrongstr[24];
            if (wrong < 0) snprintf(wrongstr, sizeof wrongstr, "N/A");
            else snprintf(wrongstr, sizeof wrongstr, "%lld", wrong);
            fprintf(stderr, "  %10zu %12zu %8s %6s %5s %10.2f %8.3f %8.3f %8s\n", nbytes, pc,
                    o.dt->name, redop, rooted ? rootstr : "-", sec * 1e6, algbw, busbw, wrongstr);
        }
        free(send);
        free(recv);
        if (size == 0) break; /* a zero size never grows */
    }
    free(lat);

    MPI_Finalize();
    return 0;
}
