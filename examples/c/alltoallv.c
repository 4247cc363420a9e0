//go:build ignore

// alltoallv: the token exchange of a Mixture-of-Experts layer (uneven
// all-to-all), a ring of sends and receives posted as one group, and
// sub-communicators, through occl's C ABI. Run under a launcher like
// allreduce.c; every rank checks every element and exits non-zero on a
// mismatch.

#include <stdint.h>
#include <string.h>

#include "common.h"

static long wrong;

#define EXPECT(cond, ...)                   \
  do {                                      \
    if (!(cond) && wrong++ < 5) {           \
      fprintf(stderr, __VA_ARGS__);         \
      fputc('\n', stderr);                  \
    }                                       \
  } while (0)

// tokens is how many elements rank s routes to rank d: uneven, some zero.
static size_t tokens(int s, int d) { return (size_t)((s * 7 + d * 3) % 5) * 1000 + (s == d ? 0 : 17); }

static int32_t value(int s, int d, size_t i) { return (int32_t)(s * 100000000 + d * 1000000 + (int32_t)i); }

int main(void) {
  occlComm_t comm;
  int rank, n;
  OCCLCHECK(occlCommInitFromEnv(&comm));
  OCCLCHECK(occlCommUserRank(comm, &rank));
  OCCLCHECK(occlCommCount(comm, &n));

  // AllToAllv, blocks packed in peer order on both sides.
  size_t* sc = calloc(n, sizeof *sc);
  size_t* sd = calloc(n, sizeof *sd);
  size_t* rc = calloc(n, sizeof *rc);
  size_t* rd = calloc(n, sizeof *rd);
  size_t stotal = 0, rtotal = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = tokens(rank, p), sd[p] = stotal, stotal += sc[p];
    rc[p] = tokens(p, rank), rd[p] = rtotal, rtotal += rc[p];
  }
  int32_t* send = malloc((stotal + 1) * sizeof *send);
  int32_t* recv = malloc((rtotal + 1) * sizeof *recv);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < sc[p]; i++) send[sd[p] + i] = value(rank, p, i);
  OCCLCHECK(occlCommSetTrafficTag(comm, "moe/dispatch"));
  OCCLCHECK(occlAllToAllv(send, sc, sd, recv, rc, rd, occlInt32, comm));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < rc[p]; i++)
      EXPECT(recv[rd[p] + i] == value(p, rank, i), "alltoallv from %d [%zu] = %d", p, i, recv[rd[p] + i]);

  // The traffic matrix of the tag, on every rank: row rank, column p holds
  // the bytes this rank sent to p.
  char json[1 << 14];
  size_t needed = 0;
  OCCLCHECK(occlCommTrafficMatrix(comm, "moe/dispatch", json, sizeof json, &needed));
  char expect[64];
  snprintf(expect, sizeof expect, "%zu", tokens(rank, (rank + 1) % n) * 4);
  EXPECT(needed > 0 && strstr(json, "\"tag\":\"moe/dispatch\"") != NULL && strstr(json, expect) != NULL,
         "traffic matrix %s lacks %s", json, expect);
  OCCLCHECK(occlCommSetTrafficTag(comm, NULL));

  // A ring: send to the next rank and receive from the previous one, in one
  // group so that they progress together.
  double out[100], in[100];
  for (int i = 0; i < 100; i++) out[i] = rank * 1000 + i, in[i] = -1;
  OCCLCHECK(occlGroupStart());
  OCCLCHECK(occlSend(out, 100, occlDouble, (rank + 1) % n, comm));
  OCCLCHECK(occlRecv(in, 100, occlDouble, (rank + n - 1) % n, comm));
  OCCLCHECK(occlGroupEnd());
  for (int i = 0; i < 100; i++)
    EXPECT(in[i] == ((rank + n - 1) % n) * 1000 + i, "ring [%d] = %g", i, in[i]);

  // Expert-parallel groups: split into pairs of consecutive ranks and
  // all-gather inside each.
  occlComm_t pair;
  OCCLCHECK(occlCommSplit(comm, rank / 2, rank, &pair));
  int prank, pn;
  OCCLCHECK(occlCommUserRank(pair, &prank));
  OCCLCHECK(occlCommCount(pair, &pn));
  int64_t mine = rank, all[2] = {-1, -1};
  OCCLCHECK(occlAllGather(&mine, all, 1, occlInt64, pair));
  for (int i = 0; i < pn; i++) EXPECT(all[i] == (rank / 2) * 2 + i, "pair allgather [%d] = %lld", i, (long long)all[i]);
  OCCLCHECK(occlCommDestroy(pair));

  OCCLCHECK(occlBarrier(comm));
  OCCLCHECK(occlCommDestroy(comm));
  if (wrong) {
    fprintf(stderr, "rank %d: %ld wrong\n", rank, wrong);
    return 1;
  }
  printf("rank %d of %d: alltoallv of %zu elements, ring, split: ok\n", rank, n, stotal);
  return 0;
}
