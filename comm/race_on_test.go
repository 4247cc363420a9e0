//go:build race

package comm_test

import "testing"

// raceEnabled: under the race detector a process's resident memory
// includes the detector's shadow memory, which grows with everything the
// process allocates, so TestSoak does not hold it to its growth limit.
const raceEnabled = true

// skipUnderRace skips a multi-process test, or a case of one, under the
// race detector, where every process of the job is a race build and runs
// 5 to 10 times slower on the same cores. Only those whose code paths
// another test or case (named by covered) runs under the detector are
// skipped: a different process count or an extra variable on the same
// transport, or the same scenario in one process (its ranks on
// goroutines, where the detector sees them all). Every one runs without
// the detector in the same CI.
func skipUnderRace(t *testing.T, covered string) {
	t.Helper()
	t.Skipf("under the race detector %s runs the same paths; this case runs without it", covered)
}
