//go:build ignore

// grow: spare processes join a running job on an emulated fabric. The
// processes of OCCL_RANK below MEMBERS make a communicator of MEMBERS ranks
// on OCCL_UNIQUE_ID with topology MEMBER_TOPO (occlCommInitRankConfig);
// the others are spares. The members grow it by the spares
// (occlCommGrowConfig) into a communicator with topology GROWN_TOPO, which
// the spares join (occlJoinConfig) with the id GROW_ID, made on the
// members' rank 0 host and handed to the spares (here on the command line).
// Every rank of the grown communicator prints its topology as JSON, checks
// an all-reduce on it, and the members one on their old communicator.
//
// usage: grow GROW_ID MEMBERS MEMBER_TOPO GROWN_TOPO
// Run under a launcher (OCCL_RANK, OCCL_UNIQUE_ID); exits non-zero on any
// error or wrong element.

#include <string.h>

#include "common.h"

static void uniqueId(occlUniqueId* id, const char* s) {
  if (!s || strlen(s) >= sizeof id->internal) {
    fprintf(stderr, "bad unique id %s\n", s ? s : "(unset)");
    exit(2);
  }
  memset(id, 0, sizeof *id);
  strcpy(id->internal, s);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: grow GROW_ID MEMBERS MEMBER_TOPO GROWN_TOPO\n");
    return 2;
  }
  const char* env = getenv("OCCL_RANK");
  int me = env ? atoi(env) : -1, members = atoi(argv[2]);
  if (me < 0 || members < 1) {
    fprintf(stderr, "OCCL_RANK %s, MEMBERS %s\n", env ? env : "(unset)", argv[2]);
    return 2;
  }
  occlUniqueId jobId, growId;
  uniqueId(&growId, argv[1]);
  occlConfig_t grownConfig = OCCL_CONFIG_INITIALIZER;
  grownConfig.topology = argv[4];

  occlComm_t old = NULL, grown = NULL;
  if (me < members) {
    uniqueId(&jobId, getenv("OCCL_UNIQUE_ID"));
    occlConfig_t config = OCCL_CONFIG_INITIALIZER;
    config.topology = argv[3];
    OCCLCHECK(occlCommInitRankConfig(&old, members, jobId, me, &config));
    // Without the grown topology, a communicator with one cannot grow.
    occlComm_t none = (occlComm_t)1;
    occlResult_t r = occlCommGrow(old, growId, 1, &none);
    if (r != occlInvalidArgument || none != NULL) {
      fprintf(stderr, "rank %d: occlCommGrow of a communicator with a topology: %s, want occlInvalidArgument\n", me,
              occlGetErrorString(r));
      return 1;
    }
    // Every process not a member is a spare: OCCL_WORLD_SIZE counts them all.
    env = getenv("OCCL_WORLD_SIZE");
    int njoin = (env ? atoi(env) : 0) - members;
    OCCLCHECK(occlCommGrowConfig(old, growId, njoin, &grown, &grownConfig));
  } else {
    OCCLCHECK(occlJoinConfig(&grown, growId, &grownConfig));
  }

  int n = 0, rank = -1;
  OCCLCHECK(occlCommCount(grown, &n));
  OCCLCHECK(occlCommUserRank(grown, &rank));
  if (me < members && rank != me) {
    fprintf(stderr, "member %d has rank %d in the grown communicator\n", me, rank);
    return 1;
  }
  size_t needed = 0;
  occlCommTopology(grown, NULL, 0, &needed);  // too small: stores the size needed
  char* js = malloc(needed);
  OCCLCHECK(occlCommTopology(grown, js, needed, &needed));
  for (char* c = js; *c; c++)
    if (*c == '\n') *c = ' ';  // on one line
  printf("rank %d: topology %s\n", rank, js);
  free(js);

  // The sum of every rank's block, element by element.
  enum { K = 1031 };
  static float x[K];
  for (int k = 0; k < K; k++) x[k] = (float)(1000 * rank + k);
  OCCLCHECK(occlAllReduce(x, x, K, occlFloat, occlSum, grown));
  long bad = 0;
  for (int k = 0; k < K; k++) bad += x[k] != (float)(1000 * (n * (n - 1) / 2) + n * k);
  if (old != NULL) {
    float v = (float)(me + 1);
    OCCLCHECK(occlAllReduce(&v, &v, 1, occlFloat, occlSum, old));
    bad += v != (float)(members * (members + 1) / 2);
    OCCLCHECK(occlCommDestroy(old));
  }
  OCCLCHECK(occlCommDestroy(grown));
  if (bad) {
    fprintf(stderr, "rank %d: %ld wrong elements\n", rank, bad);
    return 1;
  }
  printf("rank %d of %d: ok\n", rank, n);
  return 0;
}
