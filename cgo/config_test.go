//go:build linux && cgo

package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestConfigLimits: the calls that take an occlConfig_t refuse values out
// of range with occlInvalidArgument and a message naming the value and the
// limit, before anything is read or computed from them. A timeoutMs above
// OCCL_MAX_TIMEOUT_MS would wrap in its conversion to nanoseconds (to a
// few milliseconds, or to a negative timeout), and an nranks above 2^20
// would have fabricRanks read for that many entries (here from an array
// of 2, which crashes the program). OCCL_MAX_TIMEOUT_MS itself is a
// working timeout: a rank that waits 100 ms for a late peer does not
// time out, as it did at the largest value a conversion to nanoseconds
// allows (the runtime adds to the timeout).
func TestConfigLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		call    string // the C call, given config, comm (1 rank) and id
		timeout string // config.timeoutMs
		fabric  bool   // config.fabricRanks = an array of 2
		want    string // the result
		msg     string // in the message
	}{
		{"2^64 ns in ms", "occlCommInitRankConfig(&other, 1, id, 0, &config)", "18446744073710LL", false,
			"occlInvalidArgument", "config.timeoutMs 18446744073710 is more than the maximum, OCCL_MAX_TIMEOUT_MS (4611686018427"},
		{"LLONG_MAX", "occlCommInitRankConfig(&other, 1, id, 0, &config)", "LLONG_MAX", false,
			"occlInvalidArgument", "config.timeoutMs 9223372036854775807 is more than the maximum"},
		{"maximum + 1", "occlCommInitRankConfig(&other, 1, id, 0, &config)", "OCCL_MAX_TIMEOUT_MS + 1", false,
			"occlInvalidArgument", "config.timeoutMs 4611686018428 is more than the maximum"},
		{"maximum", "occlCommInitRankConfig(&other, 1, id, 0, &config)", "OCCL_MAX_TIMEOUT_MS", false,
			"occlSuccess", ""},
		{"grow", "occlCommGrowConfig(comm, id, 1, &other, &config)", "LLONG_MAX", false,
			"occlInvalidArgument", "occlCommGrowConfig: config.timeoutMs 9223372036854775807 is more than the maximum"},
		{"join", "occlJoinConfig(&other, id, &config)", "18446744073710LL", false,
			"occlInvalidArgument", "occlJoinConfig: config.timeoutMs 18446744073710 is more than the maximum"},
		{"nranks 2^21", "occlCommInitRankConfig(&other, 1 << 21, id, 0, &config)", "0", true,
			"occlInvalidArgument", "nranks 2097152 is more than a communicator can have (1048576)"},
		{"nranks 2^21 without config", "occlCommInitRank(&other, 1 << 21, id, 0)", "0", false,
			"occlInvalidArgument", "occlCommInitRank: nranks 2097152 is more than a communicator can have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fabric := "NULL"
			if tc.fabric {
				fabric = "fabric"
			}
			out := runC(t, "config", expectMacro+fmt.Sprintf(`#include <limits.h>
#include <pthread.h>
#include <unistd.h>

static occlUniqueId id;

/* late runs rank r of 2 with the largest timeout; rank 1 comes 100 ms late
 * to an all-reduce. */
static occlResult_t late[2];
static char lateMsg[2][OCCL_LAST_ERROR_BYTES];
static void* late_rank(void* p) {
  int r = (int)(intptr_t)p;
  occlConfig_t config = OCCL_CONFIG_INITIALIZER;
  config.timeoutMs = OCCL_MAX_TIMEOUT_MS;
  occlComm_t c;
  float x = 1;
  late[r] = occlCommInitRankConfig(&c, 2, id, r, &config);
  if (late[r] == occlSuccess) {
    if (r == 1) usleep(100000);
    late[r] = occlAllReduce(&x, &x, 1, occlFloat, occlSum, c);
    if (late[r] == occlSuccess && x != 2) late[r] = occlInternalError;
  }
  strncpy(lateMsg[r], occlGetLastError(NULL), sizeof lateMsg[r] - 1);
  if (late[r] == occlSuccess) late[r] = occlCommDestroy(c);
  return NULL;
}

int main(void) {
  int fabric[2] = {0, 0};
  occlComm_t comm, other = NULL;
  EXPECT(occlGetUniqueId(&id), occlSuccess);
  EXPECT(occlCommInitRank(&comm, 1, id, 0), occlSuccess);
  occlConfig_t config = OCCL_CONFIG_INITIALIZER;
  config.timeoutMs = %s;
  config.fabricRanks = %s;
  (void)fabric;
  EXPECT(%s, %s);
  if (other != NULL) EXPECT(occlCommDestroy(other), occlSuccess);
  EXPECT(occlCommDestroy(comm), occlSuccess);
  if (config.timeoutMs == OCCL_MAX_TIMEOUT_MS) {
    pthread_t th[2];
    EXPECT(occlGetUniqueId(&id), occlSuccess);
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, late_rank, (void*)(intptr_t)r);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
      if (late[r] != occlSuccess) {
        fprintf(stderr, "rank %%d with the largest timeout: %%s: %%s\n", r, occlGetErrorString(late[r]), lateMsg[r]);
        return 1;
      }
  }
  puts("ok");
  return 0;
}
`, tc.timeout, fabric, tc.call, tc.want))
			if !strings.Contains(out, tc.msg) {
				t.Fatalf("the message does not say %q:\n%s", tc.msg, out)
			}
		})
	}
}
