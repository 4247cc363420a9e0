//go:build ignore

// allreduce: data-parallel gradient averaging through occl's C ABI, run
// under a launcher (occl's bench/launch, torchrun, mpirun, srun):
//
//   cc -I cgo/include examples/c/allreduce.c -L build -loccl -Wl,-rpath,$PWD/build -o allreduce
//   OCCL_RANK=0 OCCL_WORLD_SIZE=2 OCCL_UNIQUE_ID=... ./allreduce [count]
//
// Every rank checks every element of every result and exits non-zero on a
// mismatch.

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

static long wrong;

static void expect(int ok, const char* what, size_t i, double got, double want) {
  if (!ok && wrong++ < 5) fprintf(stderr, "%s[%zu] = %.17g, want %.17g\n", what, i, got, want);
}

int main(int argc, char** argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 0) : (1 << 20) + 3;
  occlComm_t comm;
  int rank, nranks;
  OCCLCHECK(occlCommInitFromEnv(&comm));
  OCCLCHECK(occlCommUserRank(comm, &rank));
  OCCLCHECK(occlCommCount(comm, &nranks));

  // Sum of float32 gradients, out of place and in place. The values are
  // small integers, so every sum is exact in any order.
  float* grad = malloc(count * sizeof *grad);
  float* sum = malloc(count * sizeof *sum);
  for (size_t i = 0; i < count; i++) grad[i] = (float)(rank + (int)(i % 251));
  OCCLCHECK(occlAllReduce(grad, sum, count, occlFloat32, occlSum, comm));
  OCCLCHECK(occlAllReduce(grad, grad, count, occlFloat32, occlSum, comm));
  double ranks = nranks * (nranks - 1) / 2.0;
  for (size_t i = 0; i < count; i++) {
    double want = ranks + (double)nranks * (double)(i % 251);
    expect(sum[i] == want, "sum", i, sum[i], want);
    expect(grad[i] == want, "in-place sum", i, grad[i], want);
  }

  // Average of float64 gradients, non-blocking, overlapped with "compute".
  double* g64 = malloc(count * sizeof *g64);
  for (size_t i = 0; i < count; i++) g64[i] = (double)(2 * rank) + 0.5 * (double)(i % 7);
  occlRequest_t req;
  OCCLCHECK(occlAllReduceAsync(g64, g64, count, occlFloat64, occlAvg, comm, &req));
  volatile double busy = 0;
  for (int i = 0; i < 100000; i++) busy += sqrt((double)i);  // g64 is not touched until occlWait
  OCCLCHECK(occlWait(req));
  for (size_t i = 0; i < count; i++) {
    double want = (double)(nranks - 1) + 0.5 * (double)(i % 7);
    expect(g64[i] == want, "avg", i, g64[i], want);
  }

  // Max of int64 and min of uint8, small buffers.
  int64_t m[17];
  uint8_t u[33];
  for (int i = 0; i < 17; i++) m[i] = (int64_t)rank * 1000000000000LL - i;
  for (int i = 0; i < 33; i++) u[i] = (uint8_t)(200 - rank - i);
  OCCLCHECK(occlAllReduce(m, m, 17, occlInt64, occlMax, comm));
  OCCLCHECK(occlAllReduce(u, u, 33, occlUint8, occlMin, comm));
  for (int i = 0; i < 17; i++) expect(m[i] == (int64_t)(nranks - 1) * 1000000000000LL - i, "max", i, (double)m[i], 0);
  for (int i = 0; i < 33; i++) expect(u[i] == (uint8_t)(200 - (nranks - 1) - i), "min", i, u[i], 0);

  // bfloat16 sum of small integers (exact): 1.0 is 0x3F80.
  uint16_t b[64];
  for (int i = 0; i < 64; i++) b[i] = 0x3F80;
  OCCLCHECK(occlAllReduce(b, b, 64, occlBfloat16, occlSum, comm));
  float fn = (float)nranks;
  uint32_t bits;
  memcpy(&bits, &fn, 4);
  for (int i = 0; i < 64; i++) expect(b[i] == (uint16_t)(bits >> 16), "bf16", i, b[i], bits >> 16);

  OCCLCHECK(occlCommDestroy(comm));
  free(grad);
  free(sum);
  free(g64);
  if (wrong) {
    fprintf(stderr, "rank %d: %ld wrong elements\n", rank, wrong);
    return 1;
  }
  printf("rank %d of %d: allreduce of %zu elements: ok\n", rank, nranks, count);
  return 0;
}
