//go:build ignore

// errors: every entry point given bad arguments — null pointers, unknown
// data types and reductions, negative and overflowing counts, ranks out of
// range, unknown and destroyed communicators and requests — must return
// occlInvalidArgument with a message from occlGetLastError, and must not
// crash or disturb the communicator. One process, a communicator of one rank.
// Exits non-zero if any check fails.

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

static int failed, checked;

// BAD checks that call returns want and leaves a message naming the function.
#define BAD(want, fn, ...)                                                                                  \
  do {                                                                                                      \
    occlResult_t r_ = fn(__VA_ARGS__);                                                                      \
    const char* m_ = occlGetLastError(NULL);                                                                \
    checked++;                                                                                              \
    if (r_ != (want) || m_ == NULL || strncmp(m_, #fn, strlen(#fn)) != 0) {                                 \
      fprintf(stderr, "FAIL line %d: %s(%s) returned %s (%d), message \"%s\"\n", __LINE__, #fn, #__VA_ARGS__, \
              occlGetErrorString(r_), r_, m_ ? m_ : "(null)");                                              \
      failed++;                                                                                             \
    } else {                                                                                                \
      printf("%-22s -> %-24s %s\n", #fn, occlGetErrorString(r_), m_);                                       \
    }                                                                                                       \
  } while (0)

#define INVALID(fn, ...) BAD(occlInvalidArgument, fn, __VA_ARGS__)

int main(void) {
  occlUniqueId id;
  occlComm_t comm, dead, other;
  occlRequest_t req;
  float x[8] = {0}, y[8] = {0};
  size_t counts[1] = {8}, displs[1] = {0};
  const size_t negative = (size_t)-1;                      // -1 passed as a count
  const size_t huge = ((size_t)1 << 62) + 1;               // count * 4 bytes overflows
  int n;
  occlResult_t async;

  INVALID(occlGetVersion, NULL);
  INVALID(occlGetUniqueId, NULL);
  OCCLCHECK(occlGetUniqueId(&id));
  INVALID(occlCommInitRank, NULL, 1, id, 0);
  INVALID(occlCommInitRank, &comm, 0, id, 0);
  INVALID(occlCommInitRank, &comm, -3, id, 0);
  INVALID(occlCommInitRank, &comm, 2, id, 2);
  INVALID(occlCommInitRank, &comm, 2, id, -1);
  INVALID(occlCommInitFromEnv, NULL);
  OCCLCHECK(occlCommInitRank(&comm, 1, id, 0));

  // Null pointers.
  INVALID(occlAllReduce, NULL, y, 8, occlFloat, occlSum, comm);
  INVALID(occlAllReduce, x, NULL, 8, occlFloat, occlSum, comm);
  INVALID(occlAllReduce, x, y, 8, occlFloat, occlSum, NULL);
  INVALID(occlAllReduceAsync, x, y, 8, occlFloat, occlSum, comm, NULL);
  INVALID(occlCommCount, comm, NULL);
  INVALID(occlCommUserRank, comm, NULL);
  INVALID(occlCommGetAsyncError, comm, NULL);
  INVALID(occlCommSplit, comm, 0, 0, NULL);
  INVALID(occlAllToAllv, x, NULL, displs, y, counts, displs, occlFloat, comm);
  INVALID(occlAllToAllv, x, counts, displs, y, counts, NULL, occlFloat, comm);
  INVALID(occlTest, NULL, &n);
  INVALID(occlCommReconfigure, comm, NULL);
  INVALID(occlCommReconfigureMany, NULL, 1, "{}");
  INVALID(occlCommReconfigureMany, &comm, 0, "{}");
  INVALID(occlCommTrafficMatrix, comm, "", NULL, 0, NULL);

  // Unknown data types and reductions.
  INVALID(occlAllReduce, x, y, 8, (occlDataType_t)occlNumTypes, occlSum, comm);
  INVALID(occlAllReduce, x, y, 8, (occlDataType_t)-1, occlSum, comm);
  INVALID(occlBroadcast, x, y, 8, (occlDataType_t)42, 0, comm);
  INVALID(occlAllReduce, x, y, 8, occlFloat, (occlRedOp_t)occlNumOps, comm);
  INVALID(occlReduce, x, y, 8, occlFloat, (occlRedOp_t)-7, 0, comm);
  INVALID(occlReduceScatter, x, y, 8, occlFloat, (occlRedOp_t)99, comm);

  // Negative and overflowing counts.
  INVALID(occlAllReduce, x, y, negative, occlFloat, occlSum, comm);
  INVALID(occlAllReduce, x, y, huge, occlFloat, occlSum, comm);
  INVALID(occlAllGather, x, y, huge, occlDouble, comm);
  INVALID(occlAllToAll, x, y, negative, occlInt8, comm);
  INVALID(occlSend, x, negative, occlFloat, 0, comm);
  INVALID(occlRecv, y, huge, occlFloat, 0, comm);
  counts[0] = negative;
  INVALID(occlAllToAllv, x, counts, displs, y, counts, displs, occlFloat, comm);
  counts[0] = 8, displs[0] = huge;
  INVALID(occlAllToAllv, x, counts, displs, y, counts, displs, occlFloat, comm);
  displs[0] = 0;

  // Ranks out of range.
  INVALID(occlBroadcast, x, y, 8, occlFloat, 1, comm);
  INVALID(occlReduce, x, y, 8, occlFloat, occlSum, -1, comm);
  INVALID(occlSend, x, 8, occlFloat, 1, comm);
  INVALID(occlRecv, y, 8, occlFloat, -1, comm);
  INVALID(occlCommSplit, comm, -2, 0, &dead);

  // Configurations: NULL, too small, a topology that is not one, fabric
  // ranks for a grow or a join, a grown topology of the wrong size.
  occlComm_t none = (occlComm_t)1;
  occlConfig_t config = OCCL_CONFIG_INITIALIZER;
  INVALID(occlCommInitRankConfig, &other, 1, id, 0, NULL);
  config.size = sizeof(size_t);
  INVALID(occlCommInitRankConfig, &other, 1, id, 0, &config);
  config.size = sizeof config;
  config.topology = "hosts=many";
  INVALID(occlCommInitRankConfig, &other, 1, id, 0, &config);
  INVALID(occlJoinConfig, &other, id, &config);
  INVALID(occlCommGrowConfig, comm, id, 1, &none, &config);
  if (none != NULL) fprintf(stderr, "FAIL: newcomm not cleared\n"), failed++;
  config.topology = "hosts=1x1";  // one rank: the grown communicator has two
  INVALID(occlCommGrowConfig, comm, id, 1, &none, &config);
  config.topology = NULL;
  int fabric[2] = {0, 1};
  config.fabricRanks = fabric;
  INVALID(occlCommGrowConfig, comm, id, 1, &none, &config);
  INVALID(occlJoinConfig, &other, id, &config);
  config.fabricRanks = NULL;
  INVALID(occlCommGrowConfig, comm, id, 1, &none, NULL);
  INVALID(occlCommGrowConfig, comm, id, 0, &none, &config);
  INVALID(occlCommGrowConfig, comm, id, 1, NULL, &config);
  INVALID(occlJoinConfig, NULL, id, &config);
  INVALID(occlJoinConfig, &other, id, NULL);
  // A program built against the occl.h whose occlConfig_t ended with
  // fabricRanks passes that size: accepted, with no topology.
  {
    occlUniqueId id1;
    OCCLCHECK(occlGetUniqueId(&id1));
    occlConfig_t first = OCCL_CONFIG_INITIALIZER;
    first.size = offsetof(occlConfig_t, topology);
    first.topology = "hosts=many";  // beyond its size: not read
    OCCLCHECK(occlCommInitRankConfig(&other, 1, id1, 0, &first));
    OCCLCHECK(occlCommDestroy(other));
  }

  // A topology that is not JSON; a traffic buffer too small.
  INVALID(occlCommReconfigure, comm, "{not json");
  size_t needed = 0;
  char small[4];
  INVALID(occlCommTrafficMatrix, comm, "", small, sizeof small, &needed);
  if (needed <= sizeof small) fprintf(stderr, "FAIL: needed %zu\n", needed), failed++;

  // None of that hurt the communicator.
  OCCLCHECK(occlCommGetAsyncError(comm, &async));
  if (async != occlSuccess) fprintf(stderr, "FAIL: async error %d after bad calls\n", async), failed++;
  for (int i = 0; i < 8; i++) x[i] = (float)i;
  OCCLCHECK(occlAllReduce(x, y, 8, occlFloat, occlSum, comm));
  if (y[7] != 7.0f) fprintf(stderr, "FAIL: allreduce gave %g\n", y[7]), failed++;
  char* json = malloc(needed);
  OCCLCHECK(occlCommTrafficMatrix(comm, "", json, needed, &needed));  // the kept matrix
  free(json);

  // Requests: unknown, released.
  OCCLCHECK(occlAllReduceAsync(x, y, 8, occlFloat, occlSum, comm, &req));
  OCCLCHECK(occlWait(req));
  INVALID(occlWait, req);
  INVALID(occlTest, req, &n);
  INVALID(occlRequestFree, req);
  INVALID(occlWait, (occlRequest_t)comm);

  // Usage errors.
  BAD(occlInvalidUsage, occlGroupEnd);

  // A destroyed communicator: every call is refused, nothing crashes, and
  // occlGetLastError(dead) falls back to this thread's message.
  OCCLCHECK(occlCommSplit(comm, 0, 0, &dead));
  OCCLCHECK(occlCommDestroy(dead));
  INVALID(occlCommDestroy, dead);
  INVALID(occlCommAbort, dead);
  INVALID(occlCommCount, dead, &n);
  INVALID(occlAllReduce, x, y, 8, occlFloat, occlSum, dead);
  INVALID(occlAllReduceAsync, x, y, 8, occlFloat, occlSum, dead, &req);
  if (req != NULL) fprintf(stderr, "FAIL: request not cleared\n"), failed++;
  INVALID(occlBarrier, dead);
  INVALID(occlCommSplit, dead, 0, 0, &other);
  if (other != NULL) fprintf(stderr, "FAIL: newcomm not cleared\n"), failed++;
  if (strstr(occlGetLastError(dead), "occlCommSplit") == NULL) fprintf(stderr, "FAIL: last error of dead\n"), failed++;
  if (strcmp(occlGetErrorString(occlInvalidArgument), "invalid argument") != 0 ||
      strcmp(occlGetErrorString((occlResult_t)1234), "unknown result") != 0)
    fprintf(stderr, "FAIL: error strings\n"), failed++;

  OCCLCHECK(occlCommDestroy(comm));
  if (failed) {
    fprintf(stderr, "%d of %d checks failed\n", failed, checked);
    return 1;
  }
  printf("errors: %d checks: ok\n", checked);
  return 0;
}
