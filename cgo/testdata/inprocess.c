// In-process tests of liboccl through its C ABI, run by TestInProcess:
//
//   single  one thread owns all ranks: communicators created, used and
//           destroyed inside groups, as an NCCL program drives several GPUs
//   threads one thread per rank, every collective and data type checked,
//           non-blocking calls, split, queries from other threads
//   abort   a watchdog thread aborts one rank; the others see occlRemoteError
//           and a flight record naming the failed all-reduce
//   shrink  one rank aborts; the others see occlRemoteError, shrink without
//           it and all-reduce on the new communicator; then they drop one
//           more rank on purpose, which calls nothing
//   grow    one thread grows a communicator of 3 ranks by 2 joiners, in a
//           group, and runs collectives on both communicators
//
// Exits 0 if every check passed.

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "occl.h"

#define NR 4

static int failures;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      pthread_mutex_lock(&fail_mu);                            \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      failures++;                                              \
      pthread_mutex_unlock(&fail_mu);                          \
    }                                                          \
  } while (0)

#define OK(call)                                                                                        \
  do {                                                                                                  \
    occlResult_t r_ = (call);                                                                           \
    if (r_ != occlSuccess) {                                                                            \
      pthread_mutex_lock(&fail_mu);                                                                     \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, occlGetErrorString(r_),        \
              occlGetLastError(NULL));                                                                  \
      failures++;                                                                                       \
      pthread_mutex_unlock(&fail_mu);                                                                   \
      return;                                                                                           \
    }                                                                                                   \
  } while (0)

// bf16 and fp16 bits of small integers (exact).
static uint16_t bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static uint16_t fp16(int v) {
  if (v == 0) return 0;
  int e = 0;
  while ((1 << (e + 1)) <= v) e++;
  uint16_t mant = (uint16_t)(((v - (1 << e)) << 10) >> e);
  return (uint16_t)(((e + 15) << 10) | mant);
}

// ---- single: one thread, all ranks -------------------------------------

static void single(void) {
  occlUniqueId id;
  OK(occlGetUniqueId(&id));
  occlComm_t comms[NR];
  OK(occlGroupStart());
  for (int r = 0; r < NR; r++) OK(occlCommInitRank(&comms[r], NR, id, r));
  // Not usable before occlGroupEnd.
  int n = 0;
  CHECK(occlCommCount(comms[0], &n) == occlInvalidUsage, "count inside the creating group");
  OK(occlGroupEnd());
  for (int r = 0; r < NR; r++) {
    int rank = -1;
    OK(occlCommCount(comms[r], &n));
    OK(occlCommUserRank(comms[r], &rank));
    CHECK(n == NR && rank == r, "count %d rank %d", n, rank);
  }

  // AllReduce of every rank, grouped.
  float x[NR][64];
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < 64; i++) x[r][i] = (float)(r + i);
  OK(occlGroupStart());
  for (int r = 0; r < NR; r++) OK(occlAllReduce(x[r], x[r], 64, occlFloat, occlSum, comms[r]));
  OK(occlGroupEnd());
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < 64; i++) CHECK(x[r][i] == (float)(6 + 4 * i), "allreduce rank %d [%d] = %g", r, i, x[r][i]);

  // A ring exchange with sends and receives: every rank sends to r+1 and
  // receives from r-1, all posted in one group.
  int64_t out[NR][8], in[NR][8];
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < 8; i++) out[r][i] = 100 * r + i, in[r][i] = -1;
  OK(occlGroupStart());
  for (int r = 0; r < NR; r++) {
    OK(occlSend(out[r], 8, occlInt64, (r + 1) % NR, comms[r]));
    OK(occlRecv(in[r], 8, occlInt64, (r + NR - 1) % NR, comms[r]));
  }
  OK(occlGroupEnd());
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < 8; i++)
      CHECK(in[r][i] == 100 * ((r + NR - 1) % NR) + i, "ring rank %d [%d] = %" PRId64, r, i, in[r][i]);

  // Non-blocking calls from one thread, then occlTest until done.
  double d[NR][16];
  occlRequest_t req[NR];
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < 16; i++) d[r][i] = r + 1;
  for (int r = 0; r < NR; r++) OK(occlAllReduceAsync(d[r], d[r], 16, occlDouble, occlProd, comms[r], &req[r]));
  for (int r = 0; r < NR; r++) {
    int done = 0;
    while (!done) OK(occlTest(req[r], &done));
    CHECK(occlTest(req[r], &done) == occlInvalidArgument, "request released by occlTest");
    for (int i = 0; i < 16; i++) CHECK(d[r][i] == 24.0, "prod rank %d = %g", r, d[r][i]);
  }
  // Non-blocking calls are refused inside a group.
  OK(occlGroupStart());
  occlRequest_t bad = (occlRequest_t)1;
  CHECK(occlBarrierAsync(comms[0], &bad) == occlInvalidUsage && bad == NULL, "async in a group");
  OK(occlGroupEnd());
  CHECK(occlGroupEnd() == occlInvalidUsage, "group end without start");

  // Split into even and odd ranks, in a group; the odd ones by key reversed.
  occlComm_t sub[NR];
  OK(occlGroupStart());
  for (int r = 0; r < NR; r++) OK(occlCommSplit(comms[r], r % 2, r % 2 ? -r : r, &sub[r]));
  OK(occlGroupEnd());
  int32_t v[NR];
  OK(occlGroupStart());
  for (int r = 0; r < NR; r++) {
    int sr = -1;
    OK(occlCommUserRank(sub[r], &sr));
    CHECK(sr == (r % 2 ? (r == 3 ? 0 : 1) : r / 2), "split rank of %d is %d", r, sr);
    v[r] = r;
    OK(occlAllReduce(&v[r], &v[r], 1, occlInt32, occlMax, sub[r]));
  }
  OK(occlGroupEnd());
  for (int r = 0; r < NR; r++) CHECK(v[r] == (r % 2 ? 3 : 2), "split max rank %d = %d", r, v[r]);

  OK(occlGroupStart());
  for (int r = 0; r < NR; r++) OK(occlCommDestroy(sub[r]));
  for (int r = 0; r < NR; r++) OK(occlCommDestroy(comms[r]));
  // Invalid at once.
  CHECK(occlCommCount(comms[1], &n) == occlInvalidArgument, "destroyed in a group");
  OK(occlGroupEnd());
}

// ---- threads: one thread per rank ---------------------------------------

struct rank_arg {
  occlUniqueId id;
  int rank;
  occlComm_t comm;
};

static void collectives(struct rank_arg* a) {
  const int r = a->rank;
  occlComm_t comm;
  OK(occlCommInitRank(&comm, NR, a->id, r));
  a->comm = comm;
  enum { N = 1000 };

  // AllReduce, every type, sum; avg for float; out of place.
  {
    int8_t i8[N], o8[N];
    uint64_t u64[N], ou64[N];
    uint16_t h[N], oh[N], b[N], ob[N];
    float f[N], of[N];
    for (int i = 0; i < N; i++) {
      i8[i] = (int8_t)(r - (i % 3));
      u64[i] = ((uint64_t)1 << 40) * (r + 1) + i;
      h[i] = fp16(r + 1);
      b[i] = bf16((float)(r + 1));
      f[i] = (float)(r * 2 + i % 7);
    }
    OK(occlAllReduce(i8, o8, N, occlInt8, occlSum, comm));
    OK(occlAllReduce(u64, ou64, N, occlUint64, occlSum, comm));
    OK(occlAllReduce(h, oh, N, occlHalf, occlSum, comm));
    OK(occlAllReduce(b, ob, N, occlBfloat16, occlSum, comm));
    OK(occlAllReduce(f, of, N, occlFloat32, occlAvg, comm));
    for (int i = 0; i < N; i++) {
      CHECK(o8[i] == 6 - 4 * (i % 3), "int8 [%d] = %d", i, o8[i]);
      CHECK(ou64[i] == ((uint64_t)1 << 40) * 10 + 4 * (uint64_t)i, "uint64 [%d]", i);
      CHECK(oh[i] == fp16(10), "half [%d] = %#x", i, oh[i]);
      CHECK(ob[i] == bf16(10.f), "bf16 [%d] = %#x", i, ob[i]);
      CHECK(of[i] == (float)(3 + i % 7), "avg [%d] = %g", i, of[i]);
    }
  }
  // Broadcast from rank 2 (non-roots pass NULL sendbuff), Reduce to rank 1
  // (non-roots pass NULL recvbuff).
  {
    uint32_t buf[N], red[N];
    for (int i = 0; i < N; i++) buf[i] = r == 2 ? 7u * i : 0, red[i] = 0;
    OK(occlBroadcast(r == 2 ? buf : NULL, buf, N, occlUint32, 2, comm));
    for (int i = 0; i < N; i++) CHECK(buf[i] == 7u * i, "broadcast [%d] = %u", i, buf[i]);
    OK(occlReduce(buf, r == 1 ? red : NULL, N, occlUint32, occlMin, 1, comm));
    if (r == 1)
      for (int i = 0; i < N; i++) CHECK(red[i] == 7u * i, "reduce [%d] = %u", i, red[i]);
  }
  // AllGather in place, ReduceScatter, AllToAll, Gather, Scatter.
  {
    int32_t all[NR * 10], mine[10], rs[NR * 10], a2a[NR * 10], a2b[NR * 10];
    for (int i = 0; i < 10; i++) all[r * 10 + i] = r * 1000 + i;
    OK(occlAllGather(all + r * 10, all, 10, occlInt32, comm));
    for (int j = 0; j < NR * 10; j++) CHECK(all[j] == (j / 10) * 1000 + j % 10, "allgather [%d] = %d", j, all[j]);
    for (int j = 0; j < NR * 10; j++) rs[j] = j + r;
    OK(occlReduceScatter(rs, mine, 10, occlInt32, occlSum, comm));
    for (int i = 0; i < 10; i++) CHECK(mine[i] == 4 * (r * 10 + i) + 6, "reducescatter [%d] = %d", i, mine[i]);
    for (int j = 0; j < NR * 10; j++) a2a[j] = r * 100 + j;
    OK(occlAllToAll(a2a, a2b, 10, occlInt32, comm));
    for (int j = 0; j < NR * 10; j++)
      CHECK(a2b[j] == (j / 10) * 100 + r * 10 + j % 10, "alltoall [%d] = %d", j, a2b[j]);
    int32_t g[NR * 10];
    OK(occlGather(mine, r == 3 ? g : NULL, 10, occlInt32, 3, comm));
    if (r == 3)
      for (int j = 0; j < NR * 10; j++) CHECK(g[j] == 4 * j + 6, "gather [%d] = %d", j, g[j]);
    int32_t sc[NR * 10], got[10];
    for (int j = 0; j < NR * 10; j++) sc[j] = -j;
    OK(occlScatter(r == 0 ? sc : NULL, got, 10, occlInt32, 0, comm));
    for (int i = 0; i < 10; i++) CHECK(got[i] == -(r * 10 + i), "scatter [%d] = %d", i, got[i]);
  }
  // AllToAllv: rank s sends s+d+1 elements to rank d.
  {
    size_t sc[NR], sd[NR], rc[NR], rd[NR];
    size_t so = 0, ro = 0;
    for (int d = 0; d < NR; d++) {
      sc[d] = (size_t)(r + d + 1), sd[d] = so, so += sc[d];
      rc[d] = (size_t)(d + r + 1), rd[d] = ro, ro += rc[d];
    }
    double* s = malloc(so * sizeof *s);
    double* q = malloc(ro * sizeof *q);
    for (int d = 0; d < NR; d++)
      for (size_t i = 0; i < sc[d]; i++) s[sd[d] + i] = r * 1000 + d * 10 + (double)i;
    OK(occlAllToAllv(s, sc, sd, q, rc, rd, occlFloat64, comm));
    for (int src = 0; src < NR; src++)
      for (size_t i = 0; i < rc[src]; i++)
        CHECK(q[rd[src] + i] == src * 1000 + r * 10 + (double)i, "alltoallv from %d [%zu] = %g", src, i,
              q[rd[src] + i]);
    free(s);
    free(q);
  }
  // Non-blocking: several in flight, completed in order.
  {
    float x[3][N];
    occlRequest_t q[4];
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < N; i++) x[k][i] = (float)(k + r);
    for (int k = 0; k < 3; k++) OK(occlAllReduceAsync(x[k], x[k], N, occlFloat, occlMax, comm, &q[k]));
    OK(occlBarrierAsync(comm, &q[3]));
    OK(occlWait(q[3]));
    for (int k = 0; k < 3; k++) {
      int done = 0;
      OK(occlTest(q[k], &done));  // completed before the barrier
      CHECK(done == 1, "request %d not done after a later one", k);
      for (int i = 0; i < N; i++) CHECK(x[k][i] == (float)(k + 3), "async %d [%d] = %g", k, i, x[k][i]);
    }
    OK(occlWait(NULL));
    CHECK(occlWait(q[0]) == occlInvalidArgument, "wait on a released request");
    // Send / recv between pairs, non-blocking. Operations on a communicator
    // run in issue order (like work on a CUDA stream): the even rank sends
    // first, the odd one receives first.
    int64_t sv = r, rv = -1;
    occlRequest_t sq, rq;
    if (r % 2 == 0) {
      OK(occlSendAsync(&sv, 1, occlInt64, r ^ 1, comm, &sq));
      OK(occlRecvAsync(&rv, 1, occlInt64, r ^ 1, comm, &rq));
    } else {
      OK(occlRecvAsync(&rv, 1, occlInt64, r ^ 1, comm, &rq));
      OK(occlSendAsync(&sv, 1, occlInt64, r ^ 1, comm, &sq));
    }
    OK(occlWait(rq));
    OK(occlWait(sq));
    CHECK(rv == (r ^ 1), "pair exchange got %" PRId64, rv);
  }
  OK(occlBarrier(comm));
  occlResult_t async = occlInternalError;
  OK(occlCommGetAsyncError(comm, &async));
  CHECK(async == occlSuccess, "async error %d", async);
}

static void* rank_main(void* p) {
  collectives(p);
  return NULL;
}

// reader calls the queries that may run concurrently with operations.
static volatile int stop_reader;
static void* reader(void* p) {
  struct rank_arg* args = p;
  while (!stop_reader) {
    for (int r = 0; r < NR; r++) {
      int n;
      occlResult_t e;
      occlComm_t c = args[r].comm;
      if (c == NULL) continue;
      occlCommCount(c, &n);
      occlCommGetAsyncError(c, &e);
      (void)occlGetLastError(c);
    }
  }
  return NULL;
}

static void threads(void) {
  struct rank_arg args[NR];
  pthread_t t[NR], rd;
  occlUniqueId id;
  OK(occlGetUniqueId(&id));
  for (int r = 0; r < NR; r++) args[r].id = id, args[r].rank = r, args[r].comm = NULL;
  pthread_create(&rd, NULL, reader, args);
  for (int r = 0; r < NR; r++) pthread_create(&t[r], NULL, rank_main, &args[r]);
  for (int r = 0; r < NR; r++) pthread_join(t[r], NULL);
  stop_reader = 1;
  pthread_join(rd, NULL);
  OK(occlGroupStart());
  for (int r = 0; r < NR; r++)
    if (args[r].comm) OK(occlCommDestroy(args[r].comm));
  OK(occlGroupEnd());
}

// ---- abort ---------------------------------------------------------------

struct abort_arg {
  occlUniqueId id;
  int rank;
  occlResult_t got, async, small, record;
  char msg[OCCL_LAST_ERROR_BYTES];
  size_t needed;
  char* flight;
};

static void* abort_rank(void* p) {
  struct abort_arg* a = p;
  occlComm_t comm;
  a->got = occlCommInitRank(&comm, NR, a->id, a->rank);
  if (a->got != occlSuccess) return NULL;
  if (a->rank == 3) {
    // The watchdog of rank 3 gives up: abort instead of joining the
    // all-reduce the others are waiting in.
    a->got = occlCommAbort(comm);
    return NULL;
  }
  float x[4] = {1, 2, 3, 4};
  a->got = occlAllReduce(x, x, 4, occlFloat, occlSum, comm);
  strncpy(a->msg, occlGetLastError(comm), sizeof a->msg - 1);
  occlCommGetAsyncError(comm, &a->async);
  // The flight record of the failed communicator: first its size, then
  // the record, asking again (as occl.h says) if it grew in between (its
  // time stamp can take more digits).
  a->small = occlCommFlightRecord(comm, NULL, 0, &a->needed);
  for (int try = 0; try < 3 && a->needed > 0; try++) {
    free(a->flight);
    a->flight = malloc(a->needed);
    a->record = occlCommFlightRecord(comm, a->flight, a->needed, &a->needed);
    if (a->record == occlSuccess) break;
  }
  occlCommDestroy(comm);
  return NULL;
}

static void abort_test(void) {
  struct abort_arg args[NR];
  pthread_t t[NR];
  occlUniqueId id;
  OK(occlGetUniqueId(&id));
  for (int r = 0; r < NR; r++) memset(&args[r], 0, sizeof args[r]), args[r].id = id, args[r].rank = r;
  for (int r = 0; r < NR; r++) pthread_create(&t[r], NULL, abort_rank, &args[r]);
  for (int r = 0; r < NR; r++) pthread_join(t[r], NULL);
  CHECK(args[3].got == occlSuccess, "abort returned %d", args[3].got);
  for (int r = 0; r < 3; r++) {
    CHECK(args[r].got == occlRemoteError, "rank %d all-reduce after abort returned %s", r,
          occlGetErrorString(args[r].got));
    CHECK(args[r].async == occlRemoteError, "rank %d async error %d", r, args[r].async);
    CHECK(strstr(args[r].msg, "abort") != NULL, "rank %d message %s", r, args[r].msg);
    CHECK(args[r].small == occlInvalidArgument && args[r].needed > 0, "rank %d flight record without a buffer: %d, needs %zu",
          r, args[r].small, args[r].needed);
    CHECK(args[r].record == occlSuccess && args[r].flight != NULL && strlen(args[r].flight) + 1 == args[r].needed,
          "rank %d flight record: %d", r, args[r].record);
    if (args[r].flight != NULL) {
      const char* op = strstr(args[r].flight, "\"op\": \"AllReduce\"");
      CHECK(op != NULL && strstr(op, "\"state\": \"failed\"") != NULL && strstr(op, "\"seq\"") == NULL,
            "rank %d flight record does not end with the failed AllReduce: %s", r, args[r].flight);
      free(args[r].flight);
    }
  }
}

// ---- shrink ---------------------------------------------------------------

struct shrink_arg {
  occlUniqueId id;
  int rank;
  occlResult_t failed, bad, reduced;
  int size1, rank1, size2, rank2;
  float sum1, sum2;
  occlComm_t left;  // rank 2's communicator after the first shrink
};

static void shrink_rank_body(struct shrink_arg* a) {
  occlComm_t comm, comm1 = NULL, comm2 = NULL;
  OK(occlCommInitRank(&comm, NR, a->id, a->rank));
  if (a->rank == 1) {
    // Dies: its communicator is gone.
    OK(occlCommAbort(comm));
    return;
  }
  float x = (float)a->rank;
  a->failed = occlAllReduce(&x, &x, 1, occlFloat, occlSum, comm);
  int bad = 7;
  a->bad = occlCommShrink(comm, &bad, 1, &comm1);
  OK(occlCommShrink(comm, NULL, 0, &comm1));
  OK(occlCommDestroy(comm));
  OK(occlCommCount(comm1, &a->size1));
  OK(occlCommUserRank(comm1, &a->rank1));
  a->sum1 = (float)a->rank;
  a->reduced = occlAllReduce(&a->sum1, &a->sum1, 1, occlFloat, occlSum, comm1);
  // Old rank 2 (new rank 1) is dropped on purpose and calls nothing. The
  // others shrink as soon as their all-reduce returns, so its own may fail.
  if (a->rank == 2) {
    a->left = comm1;
    return;
  }
  OK(a->reduced);
  int drop = 1;
  OK(occlCommShrink(comm1, &drop, 1, &comm2));
  OK(occlCommDestroy(comm1));
  OK(occlCommCount(comm2, &a->size2));
  OK(occlCommUserRank(comm2, &a->rank2));
  a->sum2 = (float)a->rank;
  OK(occlAllReduce(&a->sum2, &a->sum2, 1, occlFloat, occlSum, comm2));
  OK(occlCommDestroy(comm2));
}

static void* shrink_rank(void* p) {
  shrink_rank_body(p);
  return NULL;
}

static void shrink_test(void) {
  struct shrink_arg args[NR];
  pthread_t t[NR];
  occlUniqueId id;
  OK(occlGetUniqueId(&id));
  for (int r = 0; r < NR; r++) memset(&args[r], 0, sizeof args[r]), args[r].id = id, args[r].rank = r;
  for (int r = 0; r < NR; r++) pthread_create(&t[r], NULL, shrink_rank, &args[r]);
  for (int r = 0; r < NR; r++) pthread_join(t[r], NULL);
  // Survivors of the abort: old ranks 0, 2, 3, new ranks 0, 1, 2; the sum
  // of their old ranks is 5. Then old ranks 0 and 3, new ranks 0 and 1.
  const int survivors[] = {0, 2, 3};
  for (int i = 0; i < 3; i++) {
    struct shrink_arg* a = &args[survivors[i]];
    CHECK(a->failed == occlRemoteError, "rank %d all-reduce with an aborted rank: %s", a->rank, occlGetErrorString(a->failed));
    CHECK(a->bad == occlInvalidArgument, "rank %d shrink excluding rank 7: %s", a->rank, occlGetErrorString(a->bad));
    CHECK(a->size1 == 3 && a->rank1 == i, "rank %d after the first shrink: rank %d of %d", a->rank, a->rank1, a->size1);
    CHECK((a->reduced == occlSuccess && a->sum1 == 5) || (a->rank == 2 && a->reduced == occlRemoteError),
          "rank %d all-reduce after the first shrink: %s, sum %g", a->rank, occlGetErrorString(a->reduced), a->sum1);
  }
  CHECK(args[0].size2 == 2 && args[0].rank2 == 0 && args[0].sum2 == 3, "rank 0 after the second shrink: rank %d of %d, sum %g",
        args[0].rank2, args[0].size2, args[0].sum2);
  CHECK(args[3].size2 == 2 && args[3].rank2 == 1 && args[3].sum2 == 3, "rank 3 after the second shrink: rank %d of %d, sum %g",
        args[3].rank2, args[3].size2, args[3].sum2);
  // The dropped rank's communicator failed.
  if (args[2].left != NULL) {
    float x = 1;
    occlResult_t r = occlAllReduce(&x, &x, 1, occlFloat, occlSum, args[2].left);
    CHECK(r == occlRemoteError, "dropped rank's all-reduce: %s", occlGetErrorString(r));
    occlCommDestroy(args[2].left);
  }
}

// ---- grow: 3 members and 2 joiners, one thread -------------------------

static void grow(void) {
  enum { M = 3, J = 2, N = M + J };
  occlUniqueId id, growId;
  OK(occlGetUniqueId(&id));
  OK(occlGetUniqueId(&growId));
  occlComm_t old[M], grown[N];
  OK(occlGroupStart());
  for (int r = 0; r < M; r++) OK(occlCommInitRank(&old[r], M, id, r));
  OK(occlGroupEnd());
  occlComm_t none = (occlComm_t)1;
  CHECK(occlCommGrow(old[0], growId, 0, &none) == occlInvalidArgument && none == NULL, "grow by 0");
  CHECK(occlJoin(NULL, growId) == occlInvalidArgument, "join into NULL");

  // The members grow and the joiners join in one group: occlGroupEnd
  // creates them all at once.
  OK(occlGroupStart());
  for (int r = 0; r < M; r++) OK(occlCommGrow(old[r], growId, J, &grown[r]));
  for (int j = 0; j < J; j++) OK(occlJoin(&grown[M + j], growId));
  OK(occlGroupEnd());
  int seen = 0;
  for (int i = 0; i < N; i++) {
    int n = 0, rank = -1;
    OK(occlCommCount(grown[i], &n));
    OK(occlCommUserRank(grown[i], &rank));
    CHECK(n == N, "grown count %d", n);
    if (i < M) CHECK(rank == i, "member %d has rank %d", i, rank);
    else CHECK(rank >= M && rank < N && !(seen & (1 << rank)), "joiner has rank %d", rank);
    seen |= 1 << rank;
  }

  // AllReduce and AllGather on the grown communicator, then AllReduce on
  // the old one.
  int32_t x[N][4], y[N], g[N][N];
  for (int i = 0; i < N; i++) {
    int rank = -1;
    OK(occlCommUserRank(grown[i], &rank));
    for (int k = 0; k < 4; k++) x[i][k] = 10 * rank + k;
    y[i] = 7 * rank + 1;
  }
  OK(occlGroupStart());
  for (int i = 0; i < N; i++) {
    OK(occlAllReduce(x[i], x[i], 4, occlInt32, occlSum, grown[i]));
    OK(occlAllGather(&y[i], g[i], 1, occlInt32, grown[i]));
  }
  OK(occlGroupEnd());
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < 4; k++) CHECK(x[i][k] == 10 * (N * (N - 1) / 2) + N * k, "grown allreduce %d [%d] = %d", i, k, x[i][k]);
    for (int q = 0; q < N; q++) CHECK(g[i][q] == 7 * q + 1, "grown allgather %d [%d] = %d", i, q, g[i][q]);
  }
  int32_t v[M];
  OK(occlGroupStart());
  for (int r = 0; r < M; r++) {
    v[r] = r + 1;
    OK(occlAllReduce(&v[r], &v[r], 1, occlInt32, occlSum, old[r]));
  }
  OK(occlGroupEnd());
  for (int r = 0; r < M; r++) CHECK(v[r] == M * (M + 1) / 2, "old allreduce rank %d = %d", r, v[r]);
  OK(occlGroupStart());
  for (int i = 0; i < N; i++) OK(occlCommDestroy(grown[i]));
  for (int r = 0; r < M; r++) OK(occlCommDestroy(old[r]));
  OK(occlGroupEnd());
}

int main(int argc, char** argv) {
  int version = 0;
  occlGetVersion(&version);
  CHECK(version == OCCL_VERSION_CODE, "version %d", version);
  const char* which = argc > 1 ? argv[1] : "all";
  if (!strcmp(which, "all") || !strcmp(which, "single")) single();
  if (!strcmp(which, "all") || !strcmp(which, "threads")) threads();
  if (!strcmp(which, "all") || !strcmp(which, "abort")) abort_test();
  if (!strcmp(which, "all") || !strcmp(which, "shrink")) shrink_test();
  if (!strcmp(which, "all") || !strcmp(which, "grow")) grow();
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("inprocess %s: ok\n", which);
  return 0;
}
