//go:build ignore

// bench: times occlAllReduce or occlAllToAll through the C ABI the way
// nccl-tests (and occl-bench) do, so that the C ABI's cost can be compared
// with the Go API's in the same run:
//
//   bench [-o allreduce|alltoall] [-b BYTES] [-n ITERS] [-w WARMUP] [-c CHECK] [-a ALIGN] [-B BLOCKING]
//
// float32 (sum for all-reduce), BYTES per rank (default 64 MiB; for
// all-to-all the whole send buffer, BYTES/n to each rank, as nccl-tests
// counts it), in buffers aligned to ALIGN bytes (default 4096, like the Go
// heap's large objects; 0: plain malloc, which offsets large blocks 16 bytes
// from a page). Each variant (out of place, then in place for all-reduce
// only) issues WARMUP operations, a barrier, then ITERS non-blocking
// operations back to back and waits for the last (operations complete in
// order), like nccl-tests synchronising its stream once per batch; with
// -B 1, ITERS blocking calls one after the other instead (occl-bench -z 1);
// with -B 2, each a non-blocking call then occlWait on it, before the next
// (occl-bench -z 2, and what torch.distributed's process group does for a
// call without async_op). The time
// is the maximum over ranks of each rank's average; algbw = bytes / time,
// busbw = algbw * 2(n-1)/n for all-reduce and (n-1)/n for all-to-all, as
// nccl-tests defines them. Rank 0 prints a line of the nccl-tests table and
// two machine-readable lines (the all-to-all is timed out of place only: its second
// column repeats the first):
//
//   busbw_GBps <out-of-place> <in-place>
//   time_us <out-of-place> <in-place>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return (size_t)v;
}

// alltoall selects occlAllToAll (-o alltoall) instead of occlAllReduce.
static int alltoall = 0;

// issue starts one operation of count elements per rank (all-to-all:
// count/n to each rank) from send into recv; blocking when req is NULL.
static occlResult_t issue(occlComm_t comm, const float* send, float* recv, size_t count, int n,
                          occlRequest_t* req) {
  if (alltoall) {
    if (!req) return occlAllToAll(send, recv, count / (size_t)n, occlFloat, comm);
    return occlAllToAllAsync(send, recv, count / (size_t)n, occlFloat, comm, req);
  }
  if (!req) return occlAllReduce(send, recv, count, occlFloat, occlSum, comm);
  return occlAllReduceAsync(send, recv, count, occlFloat, occlSum, comm, req);
}

// run times iters operations of send into recv and returns the maximum
// over ranks of the average time in seconds.
static double run(occlComm_t comm, const float* send, float* recv, size_t count, int n, int iters, int warmup,
                  occlRequest_t* reqs, int blocking) {
  for (int i = 0; i < warmup; i++) OCCLCHECK(issue(comm, send, recv, count, n, &reqs[i]));
  for (int i = 0; i < warmup; i++) OCCLCHECK(occlRequestFree(reqs[i]));
  OCCLCHECK(occlBarrier(comm));  // also waits for the warmup (issue order)
  double t0 = now();
  if (blocking) {
    for (int i = 0; i < iters; i++) {
      if (blocking == 2) {
        OCCLCHECK(issue(comm, send, recv, count, n, &reqs[0]));
        OCCLCHECK(occlWait(reqs[0]));
      } else {
        OCCLCHECK(issue(comm, send, recv, count, n, NULL));
      }
    }
    double avg = (now() - t0) / iters;
    OCCLCHECK(occlAllReduce(&avg, &avg, 1, occlDouble, occlMax, comm));
    return avg;
  }
  for (int i = 0; i < iters; i++) OCCLCHECK(issue(comm, send, recv, count, n, &reqs[i]));
  OCCLCHECK(occlWait(reqs[iters - 1]));
  double avg = (now() - t0) / iters;
  for (int i = 0; i < iters - 1; i++) {
    int done = 0;
    OCCLCHECK(occlTest(reqs[i], &done));
    if (!done) {
      fprintf(stderr, "operation %d not complete after a later one\n", i);
      exit(1);
    }
  }
  OCCLCHECK(occlAllReduce(&avg, &avg, 1, occlDouble, occlMax, comm));
  return avg;
}

// value is element i of rank r's send buffer in check.
static float value(int r, size_t i) { return (float)((r + (int)i) % 11); }

// check fills send with rank-dependent small integers, runs one operation
// and counts the wrong elements over all ranks.
static long check(occlComm_t comm, float* send, float* recv, size_t count, int rank, int n) {
  for (size_t i = 0; i < count; i++) send[i] = value(rank, i);
  OCCLCHECK(issue(comm, send, recv, count, n, NULL));
  int64_t wrong = 0;
  size_t per = count / (size_t)n;
  for (size_t i = 0; i < (alltoall ? per * (size_t)n : count); i++) {
    float want = 0;
    if (alltoall) {
      // Block s of recv is block rank of rank s's send buffer.
      want = value((int)(i / per), (size_t)rank * per + i % per);
    } else {
      for (int r = 0; r < n; r++) want += value(r, i);
    }
    if (recv[i] != want) wrong++;
  }
  OCCLCHECK(occlAllReduce(&wrong, &wrong, 1, occlInt64, occlSum, comm));
  return (long)wrong;
}


int main(int argc, char** argv) {
  size_t bytes = 64 << 20;
  int iters = 20, warmup = 5, docheck = 1, blocking = 0;
  size_t align = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-o")) alltoall = !strcmp(argv[i + 1], "alltoall");
    else if (!strcmp(argv[i], "-b")) bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-c")) docheck = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-a")) align = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-B")) blocking = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench [-o allreduce|alltoall] [-b BYTES] [-n ITERS] [-w WARMUP] [-c 0|1] [-a ALIGN] [-B 0|1|2]\n");
      return 2;
    }
  }
  if (iters < 1 || warmup < 0) return 2;
  occlComm_t comm;
  int rank, n;
  OCCLCHECK(occlCommInitFromEnv(&comm));
  OCCLCHECK(occlCommUserRank(comm, &rank));
  OCCLCHECK(occlCommCount(comm, &n));
  size_t count = bytes / sizeof(float);
  bytes = count * sizeof(float);
  float *send, *recv;
  if (align == 0) {
    send = malloc(bytes);
    recv = malloc(bytes);
  } else if (posix_memalign((void**)&send, align, bytes) || posix_memalign((void**)&recv, align, bytes)) {
    fprintf(stderr, "posix_memalign(%zu, %zu) failed\n", align, bytes);
    return 2;
  }
  if (!send || !recv) return 2;
  occlRequest_t* reqs = malloc(sizeof *reqs * (size_t)(iters > warmup ? iters : warmup));
  long wrong = 0, wrongIn = 0;
  if (docheck) wrong = check(comm, send, recv, count, rank, n);
  for (size_t i = 0; i < count; i++) send[i] = 1, recv[i] = 0;  // touch every page
  double t = run(comm, send, recv, count, n, iters, warmup, reqs, blocking), tin = t;
  if (!alltoall) {
    if (docheck) wrongIn = check(comm, send, send, count, rank, n);
    tin = run(comm, send, send, count, n, iters, warmup, reqs, blocking);
  }
  double factor = alltoall ? (double)(n - 1) / n : 2.0 * (n - 1) / n;
  double alg = (double)bytes / t / 1e9, algIn = (double)bytes / tin / 1e9;
  if (rank == 0) {
    printf("#       size         count    type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n");
    printf("%12zu  %12zu   float  %6s      -1  %7.0f  %6.2f  %6.2f  %5ld  %7.0f  %6.2f  %6.2f  %5ld\n", bytes, count,
           alltoall ? "none" : "sum", t * 1e6, alg, alg * factor, docheck ? wrong : -1L, tin * 1e6, algIn, algIn * factor, docheck ? wrongIn : -1L);
    printf("busbw_GBps %.4f %.4f\n", alg * factor, algIn * factor);
    printf("time_us %.3f %.3f\n", t * 1e6, tin * 1e6);
  }
  OCCLCHECK(occlCommDestroy(comm));
  free(send);
  free(recv);
  free(reqs);
  return wrong || wrongIn ? 1 : 0;
}
