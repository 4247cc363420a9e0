package main

import (
	"runtime"
	"testing"
)

// TestMemAlloc runs occlMemAlloc's buffers through an AllToAll of 8 MiB
// on two ranks of one process (one thread each): buffers from 2 MiB start
// on a 2 MiB boundary in a mapping advised for huge pages (smaps "hg"),
// small ones are page-aligned and zeroed, the results are right, and
// occlMemFree releases them once and refuses NULL, an inner address, a
// stack address and a second free; a size of 0 and a NULL ptr are refused.
func TestMemAlloc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("huge-page buffers need Linux")
	}
	runC(t, "mem", expectMacro+`#include <pthread.h>
#define N (1u << 20) /* floats per rank: 4 MiB, 2 MiB per peer */
static occlUniqueId id;
static float* bufs[2][2];
static occlResult_t res[2];

/* advised reports whether the mapping holding p has VmFlags "hg". */
static int advised(void* p) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  int in = 0, hg = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
      in = lo <= (unsigned long)p && (unsigned long)p < hi;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      hg = strstr(line, " hg") != NULL;
      break;
    }
  }
  if (f) fclose(f);
  return hg;
}

static void* rank(void* arg) {
  int r = (int)(intptr_t)arg;
  occlComm_t comm;
  res[r] = occlCommInitRank(&comm, 2, id, r);
  if (res[r] != occlSuccess) return NULL;
  res[r] = occlAllToAll(bufs[r][0], bufs[r][1], N / 2, occlFloat32, comm);
  occlCommDestroy(comm);
  return NULL;
}

int main(void) {
  for (int r = 0; r < 2; r++) {
    for (int b = 0; b < 2; b++) {
      EXPECT(occlMemAlloc((void**)&bufs[r][b], N * sizeof(float)), occlSuccess);
      if ((uintptr_t)bufs[r][b] % (2u << 20) != 0 || !advised(bufs[r][b])) {
        fprintf(stderr, "buffer %p: not on a 2 MiB boundary or not advised\n", (void*)bufs[r][b]);
        return 1;
      }
    }
    for (unsigned i = 0; i < N; i++) bufs[r][0][i] = (float)(r * N + i);
  }
  EXPECT(occlGetUniqueId(&id), occlSuccess);
  pthread_t th[2];
  for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank, (void*)(intptr_t)r);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    if (res[r] != occlSuccess) { fprintf(stderr, "rank %d: %s\n", r, occlGetLastError(NULL)); return 1; }
    /* Block p of rank r's output is block r of rank p's input. */
    for (unsigned p = 0; p < 2; p++)
      for (unsigned i = 0; i < N / 2; i++)
        if (bufs[r][1][p * N / 2 + i] != (float)(p * N + r * N / 2 + i)) {
          fprintf(stderr, "rank %d: element %u of block %u wrong\n", r, i, p);
          return 1;
        }
  }
  for (int r = 0; r < 2; r++)
    for (int b = 0; b < 2; b++) EXPECT(occlMemFree(bufs[r][b]), occlSuccess);
  EXPECT(occlMemFree(bufs[0][0]), occlInvalidArgument);

  char* small;
  EXPECT(occlMemAlloc((void**)&small, 100), occlSuccess);
  if ((uintptr_t)small % 4096 != 0 || advised(small)) { fprintf(stderr, "small buffer %p\n", (void*)small); return 1; }
  for (int i = 0; i < 100; i++) if (small[i] != 0) { fprintf(stderr, "small buffer not zeroed\n"); return 1; }
  int local;
  EXPECT(occlMemFree(small + 1), occlInvalidArgument);
  EXPECT(occlMemFree(&local), occlInvalidArgument);
  EXPECT(occlMemFree(NULL), occlInvalidArgument);
  EXPECT(occlMemFree(small), occlSuccess);
  EXPECT(occlMemAlloc((void**)&small, 0), occlInvalidArgument);
  EXPECT(occlMemAlloc(NULL, 8), occlInvalidArgument);
  puts("ok");
  return 0;
}
`)
}
