// Several splits of one parent in one group, run by TestGroupSplitsInOrder:
//
//   groupsplits MODE ITERATIONS SPLIT...
//
// Two ranks of a communicator w, driven by one thread each (MODE threads)
// or both by one thread (MODE single), repeat ITERATIONS times: open a
// group, split w once per SPLIT, close the group, and check every new
// communicator: its size (occlCommCount), this rank's place in it
// (occlCommUserRank) and then an AllGather of the ranks' ranks in w,
// which lists its members in their order. A SPLIT is
// "COLOR0 KEY0 COLOR1 KEY1", what ranks 0 and 1 pass (a COLOR of -1 is
// OCCL_SPLIT_NOCOLOR). The splits of one parent are operations of it:
// every rank must run them in the order it recorded them, or the ranks
// pair different splits.
//
// Prints the first wrong communicator and exits 1, or prints
// "groupsplits: ok" and exits 0.

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "occl.h"

#define NR 2
#define MAXSPLITS 8

static int nsplits, iterations;
static int color[MAXSPLITS][NR], key[MAXSPLITS][NR];
static occlUniqueId id;
static occlComm_t world[NR];

static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
static int failed;

// fail reports a failure (the first one only) and returns 1.
static int fail(const char* format, ...) {
  pthread_mutex_lock(&fail_mu);
  if (!failed) {
    va_list ap;
    va_start(ap, format);
    vfprintf(stderr, format, ap);
    va_end(ap);
  }
  failed = 1;
  pthread_mutex_unlock(&fail_mu);
  return 1;
}

// OK returns 1 from the calling function if call fails.
#define OK(call, it, r)                                                                                 \
  do {                                                                                                  \
    occlResult_t r_ = (call);                                                                           \
    if (r_ != occlSuccess) {                                                                            \
      fail("iteration %d, rank %d: %s: %s: %s\n", it, r, #call, occlGetErrorString(r_),                 \
           occlGetLastError(NULL));                                                                     \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)

// members stores the ranks of w in split s's communicator of rank r, in
// their order there (by key, then rank in w), and returns how many.
static int members(int s, int r, int* m) {
  int n = 0;
  for (int q = 0; q < NR; q++)
    if (color[s][q] == color[s][r]) m[n++] = q;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && key[s][m[j]] < key[s][m[j - 1]]; j--) {
      int t = m[j];
      m[j] = m[j - 1];
      m[j - 1] = t;
    }
  return n;
}

// shape checks the size of split s's communicator c of rank r and r's
// place in it. Returns nonzero after a failure.
static int shape(int it, int s, int r, occlComm_t c) {
  if (color[s][r] == OCCL_SPLIT_NOCOLOR)
    return c != NULL && fail("iteration %d, split %d, rank %d: a communicator without a color\n", it, s, r);
  int m[NR], want = members(s, r, m), n = -1, place = 0, rank = -1;
  while (m[place] != r) place++;
  OK(occlCommCount(c, &n), it, r);
  if (n != want) return fail("iteration %d, split %d, rank %d: size %d, want %d\n", it, s, r, n, want);
  OK(occlCommUserRank(c, &rank), it, r);
  if (rank != place) return fail("iteration %d, split %d, rank %d: rank %d, want %d\n", it, s, r, rank, place);
  return 0;
}

// gather starts the AllGather of the ranks in w on split s's communicator
// c of rank r (inside a group, or runs it).
static int gather(int it, int r, occlComm_t c, int32_t* mine, int32_t* all) {
  if (c == NULL) return 0;
  *mine = r;
  for (int i = 0; i < NR; i++) all[i] = -1;
  OK(occlAllGather(mine, all, 1, occlInt32, c), it, r);
  return 0;
}

// members_ok checks the AllGather of split s's communicator of rank r.
static int members_ok(int it, int s, int r, const int32_t* all) {
  int m[NR], n = members(s, r, m);
  if (color[s][r] == OCCL_SPLIT_NOCOLOR) return 0;
  for (int i = 0; i < n; i++)
    if (all[i] != m[i])
      return fail("iteration %d, split %d, rank %d: AllGather gave rank %d at %d, want %d\n", it, s, r, all[i], i, m[i]);
  return 0;
}

// agree returns nonzero if bad is nonzero on either rank.
static int agree(int it, int r, int bad) {
  int32_t x = bad;
  OK(occlAllReduce(&x, &x, 1, occlInt32, occlMax, world[r]), it, r);
  return x != 0;
}

// rank_loop is rank r's iterations, on a thread of its own. Both ranks
// stop after an iteration that failed on either, and do not run
// collectives on communicators one of them found wrong (a wrong pairing
// can make them wait for each other on different communicators).
static int rank_loop(int r) {
  int32_t mine[MAXSPLITS], all[MAXSPLITS][NR];
  for (int it = 0; it < iterations; it++) {
    occlComm_t sub[MAXSPLITS];
    OK(occlGroupStart(), it, r);
    for (int s = 0; s < nsplits; s++) OK(occlCommSplit(world[r], color[s][r], key[s][r], &sub[s]), it, r);
    OK(occlGroupEnd(), it, r);
    int bad = 0;
    for (int s = 0; s < nsplits; s++) bad |= shape(it, s, r, sub[s]);
    if (agree(it, r, bad)) return 1;
    for (int s = 0; s < nsplits; s++) bad |= gather(it, r, sub[s], &mine[s], all[s]);
    for (int s = 0; s < nsplits; s++) bad |= members_ok(it, s, r, all[s]);
    for (int s = 0; s < nsplits; s++)
      if (sub[s] != NULL) OK(occlCommDestroy(sub[s]), it, r);
    if (agree(it, r, bad)) return 1;
  }
  return 0;
}

static void* rank_main(void* p) {
  rank_loop((int)(intptr_t)p);
  return NULL;
}

// single drives both ranks from one thread: the group holds the splits of
// both parents, each parent's in order, and the AllGathers run in a group.
static int single(void) {
  int32_t mine[NR][MAXSPLITS], all[NR][MAXSPLITS][NR];
  for (int it = 0; it < iterations; it++) {
    occlComm_t sub[NR][MAXSPLITS];
    OK(occlGroupStart(), it, -1);
    for (int r = 0; r < NR; r++)
      for (int s = 0; s < nsplits; s++) OK(occlCommSplit(world[r], color[s][r], key[s][r], &sub[r][s]), it, r);
    OK(occlGroupEnd(), it, -1);
    for (int r = 0; r < NR; r++)
      for (int s = 0; s < nsplits; s++)
        if (shape(it, s, r, sub[r][s])) return 1;
    OK(occlGroupStart(), it, -1);
    for (int r = 0; r < NR; r++)
      for (int s = 0; s < nsplits; s++) gather(it, r, sub[r][s], &mine[r][s], all[r][s]);
    OK(occlGroupEnd(), it, -1);
    for (int r = 0; r < NR; r++)
      for (int s = 0; s < nsplits; s++)
        if (members_ok(it, s, r, all[r][s])) return 1;
    OK(occlGroupStart(), it, -1);
    for (int r = 0; r < NR; r++)
      for (int s = 0; s < nsplits; s++)
        if (sub[r][s] != NULL) OK(occlCommDestroy(sub[r][s]), it, r);
    OK(occlGroupEnd(), it, -1);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc - 3 > MAXSPLITS || (strcmp(argv[1], "threads") && strcmp(argv[1], "single"))) {
    fprintf(stderr, "usage: groupsplits threads|single ITERATIONS 'COLOR0 KEY0 COLOR1 KEY1'...\n");
    return 2;
  }
  iterations = atoi(argv[2]);
  nsplits = argc - 3;
  for (int s = 0; s < nsplits; s++)
    if (sscanf(argv[3 + s], "%d %d %d %d", &color[s][0], &key[s][0], &color[s][1], &key[s][1]) != 4) {
      fprintf(stderr, "bad split %s\n", argv[3 + s]);
      return 2;
    }
  OK(occlGetUniqueId(&id), -1, -1);
  OK(occlGroupStart(), -1, -1);
  for (int r = 0; r < NR; r++) OK(occlCommInitRank(&world[r], NR, id, r), -1, r);
  OK(occlGroupEnd(), -1, -1);
  if (!strcmp(argv[1], "threads")) {
    pthread_t t[NR];
    for (int r = 0; r < NR; r++) pthread_create(&t[r], NULL, rank_main, (void*)(intptr_t)r);
    for (int r = 0; r < NR; r++) pthread_join(t[r], NULL);
  } else {
    single();
  }
  if (failed) return 1;
  OK(occlGroupStart(), -1, -1);
  for (int r = 0; r < NR; r++) OK(occlCommDestroy(world[r]), -1, r);
  OK(occlGroupEnd(), -1, -1);
  printf("groupsplits: ok\n");
  return 0;
}
