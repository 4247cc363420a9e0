//go:build ignore

// reconfigure: an MoE harness in C that rewires the fabric between phases.
// Each rank measures the dispatch all-to-all of a phase under a traffic tag,
// reads the traffic matrix, then every rank switches the communicator, and
// the expert-parallel sub-communicator split from it, to the target topology
// given as a JSON file (argv[1]) — with the OCS controller at OCCL_OCS_ADDR
// if set — and runs the next phase on the new circuits, on both.
// Run under a launcher with OCCL_TOPO describing the current fabric; exits
// non-zero on any error or wrong element.

#include <stdint.h>
#include <string.h>

#include "common.h"

static char* slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* s = malloc((size_t)n + 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) {
    perror(path);
    exit(2);
  }
  s[n] = 0;
  fclose(f);
  return s;
}

// phase runs one dispatch all-to-all: rank s sends (s+d+phase)%4+1 blocks of
// 256 floats to rank d. Returns the number of wrong elements.
static long phase(occlComm_t comm, int rank, int n, int p, const char* tag) {
  size_t sc[64], sd[64], rc[64], rd[64], st = 0, rt = 0;
  for (int d = 0; d < n; d++) {
    sc[d] = (size_t)((rank + d + p) % 4 + 1) * 256, sd[d] = st, st += sc[d];
    rc[d] = (size_t)((d + rank + p) % 4 + 1) * 256, rd[d] = rt, rt += rc[d];
  }
  float* s = malloc(st * sizeof *s);
  float* r = malloc(rt * sizeof *r);
  for (int d = 0; d < n; d++)
    for (size_t i = 0; i < sc[d]; i++) s[sd[d] + i] = (float)(rank * 100000 + d * 1000 + (int)(i % 1000));
  OCCLCHECK(occlCommSetTrafficTag(comm, tag));
  OCCLCHECK(occlAllToAllv(s, sc, sd, r, rc, rd, occlFloat, comm));
  long wrong = 0;
  for (int src = 0; src < n; src++)
    for (size_t i = 0; i < rc[src]; i++)
      if (r[rd[src] + i] != (float)(src * 100000 + rank * 1000 + (int)(i % 1000))) wrong++;
  free(s);
  free(r);
  return wrong;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: reconfigure TARGET_TOPOLOGY.json\n");
    return 2;
  }
  char* target = slurp(argv[1]);
  occlComm_t comm;
  int rank, n;
  OCCLCHECK(occlCommInitFromEnv(&comm));
  OCCLCHECK(occlCommUserRank(comm, &rank));
  OCCLCHECK(occlCommCount(comm, &n));
  if (n > 64) return 2;

  long wrong = phase(comm, rank, n, 0, "phase0");
  char json[1 << 14];
  size_t needed;
  OCCLCHECK(occlCommTrafficMatrix(comm, "phase0", json, sizeof json, &needed));
  if (rank == 0) printf("traffic of phase0: %s\n", json);

  // Expert-parallel groups: the even and the odd ranks.
  occlComm_t ep;
  int eprank, epn;
  OCCLCHECK(occlCommSplit(comm, rank % 2, rank, &ep));
  OCCLCHECK(occlCommUserRank(ep, &eprank));
  OCCLCHECK(occlCommCount(ep, &epn));

  occlComm_t both[2] = {comm, ep};
  OCCLCHECK(occlCommReconfigureMany(both, 2, target));
  wrong += phase(comm, rank, n, 1, "phase1");
  wrong += phase(ep, eprank, epn, 2, "phase1/ep");
  float x[1000];
  for (int i = 0; i < 1000; i++) x[i] = (float)rank;
  OCCLCHECK(occlAllReduce(x, x, 1000, occlFloat, occlSum, comm));
  for (int i = 0; i < 1000; i++)
    if (x[i] != (float)(n * (n - 1) / 2)) wrong++;

  OCCLCHECK(occlCommDestroy(ep));
  OCCLCHECK(occlCommDestroy(comm));
  free(target);
  if (wrong) {
    fprintf(stderr, "rank %d: %ld wrong elements\n", rank, wrong);
    return 1;
  }
  printf("rank %d: reconfigured: ok\n", rank);
  return 0;
}
