/* latency.h: the distribution of a timed loop's iteration times, as
 * occl-bench's -latency reports it (bench/latency.go's latencyOf), for
 * mpi_bench.c's -latency. Tested against latencyOf by
 * bench's TestMPIBenchLatencyOf. */
#ifndef OCCL_BENCH_LATENCY_H
#define OCCL_BENCH_LATENCY_H

#include <stdlib.h>

static int latency_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* latency_of sorts the n (at least 1) iteration times t and stores their
 * nearest-rank median, 99th percentile and maximum in out. */
static void latency_of(double *t, int n, double out[3])
{
    qsort(t, (size_t)n, sizeof *t, latency_cmp);
    int p50 = (n * 50 + 99) / 100 - 1, p99 = (n * 99 + 99) / 100 - 1;
    out[0] = t[p50 > 0 ? p50 : 0];
    out[1] = t[p99 > 0 ? p99 : 0];
    out[2] = t[n - 1];
}

#endif
