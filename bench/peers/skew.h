/*
 * skew.h: the counts of mpi_bench's alltoallv, apart from MPI so that a
 * test can build it alone (bench/demand_test.go's TestMPIBenchSkewCounts
 * checks them against occl-bench's Demand.Counts).
 *
 * skew_counts writes into counts[s*n + d] the elements rank s sends rank
 * d when the n*n*pc elements of the uniform all-to-all of pc elements per
 * pair spread over the pairs in proportion to the weights 1/(d+1)^S of
 * the destinations d (zipf:S; zipf < 0: uniform, every weight 1), rounded
 * down: the weights summed pair by pair in row order and each count
 * computed as weight / total * (n*n*pc), the operations occl-bench makes,
 * so that both round alike. It returns 0, or -1 if a count does not fit
 * an MPI int.
 */
#ifndef OCCL_SKEW_H
#define OCCL_SKEW_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static double skew_weight(double zipf, size_t d)
{
    return zipf < 0 ? 1.0 : 1.0 / pow((double)(d + 1), zipf);
}

static int skew_counts(double zipf, size_t n, size_t pc, int *counts)
{
    double total = 0;
    for (size_t s = 0; s < n; s++)
        for (size_t d = 0; d < n; d++) total += skew_weight(zipf, d);
    for (size_t s = 0; s < n; s++)
        for (size_t d = 0; d < n; d++) {
            double c = skew_weight(zipf, d) / total * (double)(n * n * pc);
            if (c > INT32_MAX) return -1;
            counts[s * n + d] = (int)c;
        }
    return 0;
}

#endif
